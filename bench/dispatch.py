"""How fast approved work gets done: sustained writes/s, and approval-to-dispatch latency.

- Sustained writes/s: N approved `bench.noop` intents are built up front and their outbox
  messages handed to RQ by the outbox's own relay (so the queue holds exactly the jobs
  production would queue for a burst of N approvals); then k worker processes start. The
  clock runs from the first attempt's start until every write has its receipt AND the
  queue, the workers' intermediate queue and the started-job registry are all empty: jobs
  that find nothing to do are paid for, as they are in production. The span to the last
  receipt alone (what the figure used to be) is reported beside it.
- Approval-to-dispatch: with k workers listening and idle, intents are approved one by one
  through runs.services.approval_decide (the inbox's service) at a steady rate (35/s by
  default); latency is each first Attempt's start minus its Approval's time.

Jobs are counted from the workers' own RQ statistics; jobs that found nothing from the
`duplicate_jobs` counter the drain keeps in Redis (control.foundation.counters).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field

from django.db.models import Max, Min
from django.utils import timezone
from rq.worker import Worker

from bench.measure import (
    check_quiet,
    ensure_bench_tool,
    make_bench_tenant,
    open_count,
    queue,
    queue_clear,
    queue_idle,
    seed_approved,
    seed_waiting,
)
from bench.processes import Children, peak_rss_bytes, rss_bytes, wait_for
from control.foundation.counters import REDIS_COUNTERS
from runs.models import Action, Approval, Attempt, Receipt
from runs.services import approval_decide


@dataclass
class JobCounts:
    """What the workers ran: every job, and those that found nothing to do."""

    jobs: int = 0
    empty: int = 0


@dataclass
class WritesResult:
    workers: int
    actions: int
    seconds: float  # sustained: first attempt -> last receipt and every delivered job run
    seconds_to_last_receipt: float
    jobs: JobCounts
    worker_rss: list[int]
    worker_peak_rss: list[int]
    succeeded: int

    @property
    def per_second(self) -> float:
        return self.actions / self.seconds if self.seconds else 0.0

    @property
    def per_second_to_last_receipt(self) -> float:
        return self.actions / self.seconds_to_last_receipt if self.seconds_to_last_receipt else 0.0


def _empty_jobs_counted() -> int:
    return int(queue().connection.hget(REDIS_COUNTERS, "duplicate_jobs") or 0)


def _jobs_run() -> int:
    return sum(
        worker.successful_job_count + worker.failed_job_count
        for worker in Worker.all(queue=queue())
    )


def measure_writes(*, count: int, workers: int, timeout: float = 600) -> WritesResult:
    ensure_bench_tool()
    check_quiet()
    bench = make_bench_tenant(f"w{workers}")
    seed_approved(bench, count)
    empty_before = _empty_jobs_counted()
    children = Children()
    try:
        processes = [children.start_worker() for _ in range(workers)]
        wait_for(
            lambda: open_count(bench.tenant) == 0,
            timeout=timeout,
            interval=0.05,
            what=f"{count} writes with {workers} workers",
        )
        wait_for(queue_idle, timeout=timeout, interval=0.005, what="every delivered job run")
        finished = timezone.now()
        jobs = JobCounts(jobs=_jobs_run(), empty=_empty_jobs_counted() - empty_before)
        rss = [rss_bytes(p.pid) for p in processes]
        peak = [peak_rss_bytes(p.pid) for p in processes]
    finally:
        for process in list(children.processes):
            errors = children.stop(process)
            if errors.strip():
                sys.stderr.write(errors[-2000:])
        queue_clear()
    first = Attempt.objects.filter(action__tenant=bench.tenant).aggregate(at=Min("started_at"))
    last = Receipt.objects.filter(tenant=bench.tenant).aggregate(at=Max("created_at"))
    return WritesResult(
        workers=workers,
        actions=count,
        seconds=(finished - first["at"]).total_seconds(),
        seconds_to_last_receipt=(last["at"] - first["at"]).total_seconds(),
        jobs=jobs,
        worker_rss=rss,
        worker_peak_rss=peak,
        succeeded=Action.objects.filter(tenant=bench.tenant, status="succeeded").count(),
    )


@dataclass
class LatencyResult:
    samples: list[float] = field(default_factory=list)  # seconds
    approvals_per_second: float = 0.0
    jobs: JobCounts = field(default_factory=JobCounts)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        if not ordered:
            return float("nan")
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
        return ordered[index]

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


def measure_latency(
    *, count: int, workers: int, rate: float = 35.0, timeout: float = 300
) -> LatencyResult:
    """Approves `count` waiting intents at `rate` per second (as fast as possible if 0)."""
    ensure_bench_tool()
    check_quiet()
    bench = make_bench_tenant("latency")
    actions = seed_waiting(bench, count)
    empty_before = _empty_jobs_counted()
    children = Children()
    try:
        for _ in range(workers):
            children.start_worker()
        q = queue()
        wait_for(lambda: len(Worker.all(queue=q)) >= workers, timeout=60, what="workers listening")
        started = time.perf_counter()
        for number, action in enumerate(actions):
            if rate:
                time.sleep(max(0.0, started + number / rate - time.perf_counter()))
            approval_decide(
                action=action,
                approver=bench.operator,
                decision="approve",
                seen_digest=action.intent_digest,
                seen_state_version=action.base_version,
            )
        approving = time.perf_counter() - started
        wait_for(
            lambda: open_count(bench.tenant) == 0,
            timeout=timeout,
            interval=0.25,
            what="approved intents dispatched",
        )
        wait_for(queue_idle, timeout=timeout, interval=0.005, what="every delivered job run")
        jobs = JobCounts(jobs=_jobs_run(), empty=_empty_jobs_counted() - empty_before)
    finally:
        children.stop_all()
        queue_clear()
    approved_at = dict(
        Approval.objects.filter(tenant=bench.tenant).values_list("action_id", "created_at")
    )
    samples = [
        (started_at - approved_at[action_id]).total_seconds()
        for action_id, started_at in Attempt.objects.filter(
            action__tenant=bench.tenant, number=1
        ).values_list("action_id", "started_at")
    ]
    return LatencyResult(samples=samples, approvals_per_second=count / approving, jobs=jobs)
