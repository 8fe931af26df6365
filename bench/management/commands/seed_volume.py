"""Seeds a tenant at volume (10,000 pending approvals, 1,000,000 events by default) for
measuring the inbox and runs pages: `python manage.py seed_volume`, then `bench`.

Rows are computed with the services' own helpers and COPYed in (bench.builder), so every
run verifies (`verify_run`). Not for production databases: it adds a whole tenant.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from bench.volume import plan_history, seed_volume


class Command(BaseCommand):
    help = "Seed a tenant with pending approvals and events at volume (for page benchmarks)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", default="volume")
        parser.add_argument("--approvals", type=int, default=10_000)
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument("--history-runs", type=int, default=1_000)
        parser.add_argument("--jobs", type=int, default=2, help="processes seeding in parallel")
        parser.add_argument("--dry-run", action="store_true", help="say what would be seeded")

    def handle(self, *args, tenant, approvals, events, history_runs, jobs, dry_run, **options):
        if approvals < 0 or events < 0 or history_runs < 0 or jobs < 1:
            raise CommandError("counts must not be negative, and at least one job")
        observations = plan_history(approvals=approvals, events=events, history_runs=history_runs)
        plan = (
            f"tenant {tenant!r}: {approvals} runs waiting for approval, "
            f"{history_runs if observations else 0} runs with {observations} observations each"
        )
        if dry_run:
            self.stdout.write(f"would seed {plan}")
            return
        started = time.perf_counter()
        report = seed_volume(
            tenant_name=tenant,
            approvals=approvals,
            events=events,
            history_runs=history_runs,
            jobs=jobs,
        )
        seconds = time.perf_counter() - started
        if options["verbosity"]:
            self.stdout.write(
                self.style.SUCCESS(
                    f"seeded {plan}: {report.runs} runs, {report.events} events in {seconds:.1f}s"
                )
            )
