"""Verifies the audit chain end to end; exits non-zero on the first broken link."""

from __future__ import annotations

import json
import re

from django.core.management.base import BaseCommand, CommandError

from control.audit import audit_expect, audit_head, audit_verify

EXPECTED_HEAD = re.compile(r"(?P<seq>[1-9][0-9]{0,17}):(?P<hash>sha256:[0-9a-f]{64})")


class Command(BaseCommand):
    help = (
        "Verify the audit chain and its signed head; --head prints the head to keep outside "
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
        if head:
            self.stdout.write(json.dumps(audit_head()))
        elif options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"audit chain intact: {verdict.entries} entries"))
