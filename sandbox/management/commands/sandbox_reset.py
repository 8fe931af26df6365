"""Puts the sandbox back to its starting state: ticket-1..ticket-100 open, nothing else."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sandbox.models import Ticket
from sandbox.services import TICKET_COUNT, sandbox_reset


class Command(BaseCommand):
    help = (
        f"Re-creates ticket-1..ticket-{TICKET_COUNT} open at version 1 and empties every other "
        "sandbox table (receipts, notifications, payments, effects, fault plans). Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would be reset, change nothing"
        )

    def handle(self, *args, dry_run: bool = False, **options):
        if dry_run:
            self.stdout.write(
                f"Would reset the sandbox: {Ticket.objects.count()} tickets now, "
                f"{TICKET_COUNT} open tickets after; other tables emptied."
            )
            return
        removed = sandbox_reset()
        if options["verbosity"] >= 2:
            for table, count in removed.items():
                self.stdout.write(f"  removed {count} {table}")
        self.stdout.write(
            self.style.SUCCESS(f"Sandbox reset: ticket-1..ticket-{TICKET_COUNT} open.")
        )
