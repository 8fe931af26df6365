"""Verifies the audit chain end to end; exits non-zero on the first broken link."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from control.audit import audit_head, audit_verify


class Command(BaseCommand):
    help = "Verify the audit chain; --head prints the chain head to keep outside the database."

    def add_arguments(self, parser):
        parser.add_argument("--head", action="store_true", help="print the head as JSON")

    def handle(self, *args, head, **options):
        verdict = audit_verify()
        if not verdict.ok:
            raise CommandError(f"audit chain broken: {verdict.problem}")
        if head:
            self.stdout.write(json.dumps(audit_head()))
        elif options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"audit chain intact: {verdict.entries} entries"))
