"""Verifies one run: event chain, replay against stored state, latest checkpoint."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from runs.record.verification import run_verify
from runs.selectors import run_by_id


class Command(BaseCommand):
    help = "Verify a run's event chain, that replay equals its stored state, and its checkpoint."

    def add_arguments(self, parser):
        parser.add_argument("run_id")

    def handle(self, *args, run_id, **options):
        run = run_by_id(run_id)
        if run is None:
            raise CommandError(f"no run {run_id}")
        problems = run_verify(run)
        if problems:
            raise CommandError(f"run {run_id} failed verification: " + "; ".join(problems))
        if options["verbosity"]:
            summary = f"{run.last_event_seq} events, version {run.state_version}"
            self.stdout.write(self.style.SUCCESS(f"run {run_id} verified: {summary}"))
