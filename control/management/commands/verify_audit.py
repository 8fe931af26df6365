"""Verifies the audit chain end to end, and every row that decides approval (tool policies,
standing rules, memberships: control.foundation.row_signing); exits non-zero on the first
broken link or on any such row that does not verify, naming each."""

from __future__ import annotations

import json
import re

from django.core.management.base import BaseCommand, CommandError

from control.foundation.audit import audit_expect, audit_head, audit_verify
from control.foundation.row_signing import unverified_rows

EXPECTED_HEAD = re.compile(r"(?P<seq>[1-9][0-9]{0,17}):(?P<hash>sha256:[0-9a-f]{64})")


class Command(BaseCommand):
    help = (
        "Verify the audit chain and its signed head, and the signatures of every tool "
        "policy, standing rule and membership; --head prints the head to keep outside "
        "the database; --expect SEQ:HASH checks the chain against a head kept earlier."
    )

    def add_arguments(self, parser):
        parser.add_argument("--head", action="store_true", help="print the head as JSON")
        parser.add_argument(
            "--expect",
            metavar="SEQ:HASH",
            help="a head exported earlier: its entry must still be there, unchanged",
        )

    def handle(self, *args, head, expect, **options):
        expected = None
        if expect is not None:
            expected = EXPECTED_HEAD.fullmatch(expect)
            if expected is None:
                raise CommandError(f"--expect wants SEQ:sha256:<64 hex>, not {expect!r}")
        verdict = audit_verify()
        if not verdict.ok:
            raise CommandError(f"audit chain broken: {verdict.problem}")
        if expected is not None:
            problem = audit_expect(seq=int(expected["seq"]), hash=expected["hash"])
            if problem:
                raise CommandError(f"audit chain broken: {problem}")
        unverified = unverified_rows()
        for row in unverified:
            self.stderr.write(f"does not verify: {row}")
        if unverified:
            tables = sorted({row.table for row in unverified})
            raise CommandError(
                f"{len(unverified)} row(s) that decide approval do not verify "
                f"({', '.join(tables)}): they decide nothing until an admin writes them again"
            )
        if head:
            self.stdout.write(json.dumps(audit_head()))
        elif options["verbosity"]:
            self.stdout.write(
                self.style.SUCCESS(
                    f"audit chain intact: {verdict.entries} entries; "
                    "every policy, standing rule and membership verifies"
                )
            )
