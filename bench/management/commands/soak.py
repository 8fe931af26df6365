"""The chaos soak (bench/soak.py): runs through real processes while workers are killed,
Redis is flushed and PostgreSQL restarts once; prints the invariant table and exits
non-zero on any violation.

It restarts the PostgreSQL cluster it is told (`--postgres-cluster`, default main) with
`pg_ctlcluster`: point DATABASE_URL at a database on a cluster nobody else is using, and
REDIS_URL at a Redis database of its own (it is flushed). Never run from tests with the
restart on (tests pass --no-postgres-restart).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from bench.soak import SoakConfig, run_soak


class Command(BaseCommand):
    help = "Chaos soak: kills, Redis flushes, a PostgreSQL restart; fails on any violation."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--waves", type=int, default=10)
        parser.add_argument("--kills", type=int, default=8)
        parser.add_argument("--redis-flushes", type=int, default=3)
        parser.add_argument(
            "--postgres-restart", action="store_true", default=True, help="(default)"
        )
        parser.add_argument("--no-postgres-restart", dest="postgres_restart", action="store_false")
        parser.add_argument("--postgres-cluster", default="main")
        parser.add_argument("--notify-share", type=float, default=0.2)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--settle-timeout", type=float, default=240.0)
        parser.add_argument("--sandbox-url", default="", help="default: start a web process")

    def handle(self, *args, **options):
        config = SoakConfig(
            runs=options["runs"],
            workers=options["workers"],
            waves=options["waves"],
            kills=options["kills"],
            redis_flushes=options["redis_flushes"],
            postgres_restart=options["postgres_restart"],
            postgres_cluster=options["postgres_cluster"],
            notify_share=options["notify_share"],
            seed=options["seed"],
            settle_timeout=options["settle_timeout"],
            sandbox_url=options["sandbox_url"],
        )
        verbose = options["verbosity"] > 0

        def say(message: str) -> None:
            if verbose:
                self.stderr.write(message)

        report = run_soak(config, say)
        self.stdout.write(report.table())
        if report.violations:
            raise CommandError("soak violations: " + "; ".join(report.violations))
        self.stdout.write(self.style.SUCCESS("soak: no violation"))
