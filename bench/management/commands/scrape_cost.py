"""Measures `/metrics` at volume: `python manage.py scrape_cost --seed 1000000`.

Seeds a throwaway tenant with a long history of settled intents (bench.scrape_history) when asked,
then prints the median of `--times` scrapes (`collect()`, every query of one) and the mean
cost of one status change in its own transaction. Not for production databases.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from bench.scrape_history import median, scrape_milliseconds, seed_history, transition_microseconds
from control.models import Tenant
from runs.models import Action


class Command(BaseCommand):
    help = "Seed a long history (optional), then time the /metrics scrape and a transition."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", default="history")
        parser.add_argument("--seed", type=int, default=0, help="settled intents to add first")
        parser.add_argument("--times", type=int, default=20, help="scrapes to time")
        parser.add_argument("--transitions", type=int, default=1_000)
        parser.add_argument("--dry-run", action="store_true", help="say what would be done")

    def handle(self, *args, tenant, seed, times, transitions, dry_run, **options):
        if seed < 0 or times < 1 or transitions < 0:
            raise CommandError("counts must not be negative, and at least one scrape")
        if dry_run:
            self.stdout.write(f"would seed {seed} intents into {tenant!r}, time {times} scrapes")
            return
        if seed:
            report = seed_history(tenant_name=tenant, actions=seed)
            self.stdout.write(f"seeded {report.actions} intents in {report.seconds:.1f} s")
        self.stdout.write(f"actions in the database: {Action.objects.count()}")
        taken = scrape_milliseconds(times)
        self.stdout.write(
            f"scrape: median {median(taken):.2f} ms over {times} "
            f"(min {min(taken):.2f}, max {max(taken):.2f}); load {os.getloadavg()[0]:.2f}"
        )
        history = Tenant.objects.filter(name=tenant).first()
        if history is not None and transitions:
            # Alternated, so a change in the machine's load falls on both alike.
            costs: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(3):
                for triggers in (True, False):
                    costs[triggers].append(
                        transition_microseconds(
                            tenant=history, count=transitions, triggers=triggers
                        )
                    )
            self.stdout.write(
                "status change, own transaction: "
                f"{median(costs[True]):.0f} us with triggers, "
                f"{median(costs[False]):.0f} us without (median of 3 rounds of "
                f"{2 * transitions}); load {os.getloadavg()[0]:.2f}"
            )
