"""The benchmark: approved writes per second and what bounds them, in one run.

Run it against a dedicated database and Redis database (it creates tenants, runs and
jobs there), with no other worker listening on the execution queue:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    REDIS_URL=redis://127.0.0.1:6379/13 python manage.py migrate
    ... python manage.py bench

Benchmarks are never timed assertions: this command reports, it does not pass or fail
(except when a measurement cannot be made at all). See docs/PERFORMANCE.md.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from dataclasses import dataclass

from django.core.management.base import BaseCommand, CommandError

from bench import claims, dispatch, history, measure
from bench.long_run import measure_long_run
from bench.report import Figure, as_json, table
from control.models import Tenant

SECTIONS = ("writes", "rq", "dbos", "ceiling", "commits", "latency", "pages", "rss", "long_run")
MB = 1024 * 1024


@dataclass(frozen=True)
class Rate:
    per_second: float


def ratios(name: str, over: dict, under: dict, target, note=None) -> list[Figure]:
    """over / under (each a result with a per_second) for every worker or process count both
    measured, named by `name` with {n}; the target applies to the largest count."""
    counts = sorted(set(over) & set(under))
    return [
        Figure(
            name.format(n=n),
            over[n].per_second / under[n].per_second,
            "x",
            target if n == counts[-1] else None,
            note(n) if note else "",
        )
        for n in counts
    ]


class Command(BaseCommand):
    help = "Measure approved writes/s (1 and 2 workers) against bare RQ, DBOS and PostgreSQL."

    def add_arguments(self, parser):
        parser.add_argument("--writes", type=int, default=10_000, help="intents per worker count")
        parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2")
        parser.add_argument("--rq-jobs", type=int, default=20_000)
        parser.add_argument("--dbos-workflows", type=int, default=4_000)
        parser.add_argument("--ceiling-commits", type=int, default=10_000)
        parser.add_argument("--commit-sample", type=int, default=500)
        parser.add_argument("--latency-samples", type=int, default=300)
        parser.add_argument(
            "--approval-rate",
            type=float,
            default=35.0,
            help="approvals per second in the latency section (0: as fast as possible)",
        )
        parser.add_argument(
            "--pages-tenant",
            default="volume",
            help="tenant whose inbox and runs pages are measured (seed it with seed_volume)",
        )
        parser.add_argument("--long-run-reads", type=int, default=5_000)
        parser.add_argument("--long-run-writes", type=int, default=1_000)
        parser.add_argument(
            "--history",
            type=int,
            default=0,
            help="also measure the writes section with this many settled writes seeded in "
            "the tables (removed afterwards), e.g. 1000000",
        )
        parser.add_argument("--skip", default="", help=f"comma-separated: {', '.join(SECTIONS)}")
        parser.add_argument("--json", dest="json_path", help="also write the figures here")

    def handle(self, *args, **options):
        skip = {name.strip() for name in options["skip"].split(",") if name.strip()}
        if unknown := skip - set(SECTIONS):
            raise CommandError(f"unknown sections to skip: {sorted(unknown)}")
        worker_counts = [int(n) for n in options["workers"].split(",") if n.strip()]
        figures: list[Figure] = []
        say = self._say(options["verbosity"])
        try:
            self._run(options, skip, worker_counts, figures, say)
        except (RuntimeError, TimeoutError) as error:
            raise CommandError(str(error)) from error
        command = shlex.join(["python", "manage.py", "bench", *sys.argv[2:]])
        self.stdout.write(table(figures))
        if options["json_path"]:
            with open(options["json_path"], "w") as out:
                out.write(as_json(figures, command=command) + "\n")

    def _say(self, verbosity: int):
        def say(message: str) -> None:
            if verbosity:
                self.stderr.write(message)

        return say

    def _run(self, options, skip, worker_counts, figures, say) -> None:
        writes, rq, dbos = {}, {}, {}
        say("VACUUM ANALYZE ...")
        prepared = measure.database_prepare()
        figures.append(
            Figure(
                "VACUUM ANALYZE before measuring",
                prepared.seconds,
                "s",
                note=f"autovacuum is {prepared.autovacuum} on this server",
            )
        )
        if "ceiling" not in skip:
            say("commit ceiling ...")
            ceiling = measure.measure_commit_ceiling(count=options["ceiling_commits"])
            figures.append(Figure("single-row commits/s, 1 process", ceiling, "/s"))
        if "writes" not in skip:
            writes = self._writes(options, worker_counts, figures, say)
            last = writes[max(worker_counts)]
            figures.append(Figure("worker RSS (max)", max(last.worker_rss) / MB, "MB", ("<", 150)))
            figures.append(Figure("worker peak RSS (max)", max(last.worker_peak_rss) / MB, "MB"))
            if options["history"]:
                self._writes_with_history(options, worker_counts, writes, figures, say)
        if "rq" not in skip:
            for workers in worker_counts:
                say(f"bare RQ no-op jobs, {workers} worker(s) ...")
                rq[workers] = measure.measure_rq(count=options["rq_jobs"], workers=workers)
                figures.append(
                    Figure(f"bare RQ jobs/s, {workers} worker(s)", rq[workers].per_second, "/s")
                )
        if "dbos" not in skip and importlib.util.find_spec("dbos") is None:
            say("dbos is not installed (pip install 'dbos>=3.4,<4'): DBOS comparison skipped")
            skip = skip | {"dbos"}
        if "dbos" not in skip:
            for processes in worker_counts:
                say(f"DBOS one-step workflows, {processes} process(es) ...")
                dbos[processes] = measure.measure_dbos(
                    count=options["dbos_workflows"], processes=processes
                )
                figures.append(
                    Figure(
                        f"DBOS one-step workflows/s, {processes} process(es)",
                        dbos[processes].per_second,
                        "/s",
                    )
                )
        figures += ratios("writes / bare RQ jobs, {n} worker(s)", writes, rq, (">=", 3))
        figures += ratios("writes / DBOS workflows, {n} process(es)", writes, dbos, (">=", 3))
        if len(writes) > 1:
            fewest, most = min(writes), max(writes)
            figures.append(
                Figure(
                    f"approved writes/s, {most} / {fewest} worker(s)",
                    writes[most].per_second / writes[fewest].per_second,
                    "x",
                    (">=", 0.9 * most / fewest),
                )
            )
        if "commits" not in skip:
            say("commits per action ...")
            commits = measure.measure_commits_per_action(count=options["commit_sample"])
            figures.append(
                Figure(
                    "write commits per action",
                    commits.writes_per_action,
                    "",
                    ("<=", 0.2),
                    f"{commits.transactions_per_action:.1f} transactions (with read-only)",
                )
            )
            figures.append(
                Figure("SQL statements per action", commits.statements_per_action, "", ("<=", 6))
            )
            figures.append(
                Figure(
                    "checkpoints signed per action", commits.checkpoints_per_action, "", ("<=", 1)
                )
            )
        if "latency" not in skip:
            say("approval-to-dispatch latency ...")
            workers = max(worker_counts)
            latency = dispatch.measure_latency(
                count=options["latency_samples"], workers=workers, rate=options["approval_rate"]
            )
            figures.append(
                Figure("approval-to-dispatch p50", latency.median * 1000, "ms", ("<", 50))
            )
            figures.append(
                Figure(
                    "approval-to-dispatch p99",
                    latency.percentile(99) * 1000,
                    "ms",
                    ("<", 250),
                    f"{len(latency.samples)} approvals at {latency.approvals_per_second:.0f}/s, "
                    f"{workers} workers, {latency.jobs.empty} of {latency.jobs.jobs} jobs empty",
                )
            )
        tenant = Tenant.objects.filter(name=options["pages_tenant"]).first()
        if "pages" not in skip and tenant is not None:
            say(f"pages of tenant {tenant.name} ...")
            for page in measure.measure_pages(tenant=tenant, paths=["/inbox/", "/runs/"]):
                if page.status != 200:
                    raise CommandError(f"{page.path} answered {page.status}")
                figures.append(Figure(f"{page.path} queries", page.queries, "", ("<=", 10)))
                figures.append(
                    Figure(f"{page.path} server time (median)", page.milliseconds, "ms", ("<", 30))
                )
        elif "pages" not in skip:
            say(f"no tenant {options['pages_tenant']!r}: run seed_volume to measure the pages")
        if "rss" not in skip and tenant is not None:
            say("web process RSS ...")
            rss = measure.measure_web_rss(paths=["/inbox/", "/runs/"], tenant=tenant)
            figures.append(Figure("web process RSS", rss / MB, "MB", note="runserver --noreload"))
        if "long_run" not in skip:
            self._long_run(options, figures, say)

    def _writes(self, options, worker_counts, figures, say, *, label: str = "") -> dict:
        """Sustained approved writes/s for each worker count, at the table's current size."""
        writes = {}
        for workers in worker_counts:
            size = history.actions_in_table()
            say(f"approved writes, {workers} worker(s), {size:,} actions in the table ...")
            result = dispatch.measure_writes(count=options["writes"], workers=workers)
            if result.succeeded != result.actions:
                raise CommandError(f"{result.succeeded} of {result.actions} writes succeeded")
            writes[workers] = result
            figures.append(
                Figure(
                    f"approved writes/s, {workers} worker(s){label}",
                    result.per_second,
                    "/s",
                    (">=", 1000) if workers == max(worker_counts) else None,
                    f"sustained: {result.actions} writes and {result.jobs.jobs} jobs in "
                    f"{result.seconds:.1f}s; {result.per_second_to_last_receipt:.0f}/s "
                    f"to the last receipt; {size:,} actions in the table at the start",
                )
            )
            figures.append(
                Figure(
                    f"empty jobs per write, {workers} worker(s){label}",
                    result.jobs.empty / result.actions,
                    "",
                    note=f"{result.jobs.empty} of {result.jobs.jobs} jobs found nothing",
                )
            )
        return writes

    def _writes_with_history(self, options, worker_counts, empty, figures, say) -> None:
        """The writes section again with N settled writes seeded (bench/history.py), then once
        more after they are removed: the figure with history is set against the mean of the
        two without, so a machine whose load drifts over the minutes between does not pass
        for the history's cost. The sections after this one measure the tables as found."""
        count = options["history"]
        label = f", {count:,} history"
        before = history.actions_in_table()
        self._claims(figures, say, options["verbosity"], label="")
        say(f"seeding {count:,} settled writes of history ...")
        seeded = history.history_seed(count=count)
        try:
            self._claims(figures, say, options["verbosity"], label=label)
            loaded = self._writes(options, worker_counts, figures, say, label=label)
        finally:
            say(f"removing the {count:,} settled writes of history ...")
            removed = history.history_remove(seeded)
        figures.append(
            Figure(
                "history seeded",
                seeded.actions,
                "actions",
                note=f"in {seeded.seconds:.0f}s, VACUUM ANALYZE included; removed after the "
                f"section in {removed:.0f}s; {before:,} actions in the table before",
            )
        )
        again = self._writes(options, worker_counts, figures, say, label=", history removed")
        without = {n: Rate((empty[n].per_second + again[n].per_second) / 2) for n in worker_counts}
        figures += ratios(
            f"writes/s with {count:,} history / empty, {{n}} worker(s)",
            loaded,
            without,
            (">=", 0.9),
            note=lambda n: (
                f"{loaded[n].per_second:.1f} / {without[n].per_second:.1f} /s, the "
                f"mean of {empty[n].per_second:.1f} before and {again[n].per_second:.1f} after"
            ),
        )

    def _claims(self, figures, say, verbosity: int, *, label: str) -> None:
        """The worker's two claim queries at the table's current size: median time, and
        their plans at verbosity 2."""
        size = history.actions_in_table()
        if verbosity >= 2:
            say(f"claim queries at {size:,} actions:\n{claims.explain_claims()}")
        for name, milliseconds in claims.claim_milliseconds().items():
            figures.append(
                Figure(
                    f"{name} claim, median{label}",
                    milliseconds,
                    "ms",
                    note=f"50 claims of {claims.BATCH}, one transaction each; "
                    f"{size:,} actions in the table",
                )
            )

    def _long_run(self, options, figures, say) -> None:
        reads, writes = options["long_run_reads"], options["long_run_writes"]
        say(f"one run of {reads} reads and {writes} writes ...")
        long = measure_long_run(reads=reads, writes=writes)
        if long.problems:
            raise CommandError(f"the long run does not verify: {long.problems}")
        figures.append(
            Figure(
                "long run: largest checkpoint",
                max(long.checkpoint_bytes) / 1024,
                "KB",
                ("<", 16),
                f"{len(long.checkpoint_bytes)} checkpoints, verify_run green",
            )
        )
        figures.append(
            Figure(
                "long run: step cost, last tenth / first tenth",
                long.growth,
                "x",
                ("<=", 1.25),
                f"{long.window_ms[0]:.1f} ms -> {long.window_ms[-1]:.1f} ms per intent",
            )
        )
