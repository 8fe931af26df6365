"""The benchmark's measurements, each a function returning what it measured.

Methods (see docs/PERFORMANCE.md for why):
- approved writes/s and approval-to-dispatch: bench/dispatch.py.
- bare RQ: N no-op jobs on the same queue, same worker command and class; the span is from
  the first dequeue to the queue and the started-job registry being empty.
- DBOS: P processes each run N/P one-step workflows against a system database on the same
  PostgreSQL server; the span is from the shared start instant to the last process's end.
- commit ceiling: one process, autocommit INSERT of one row each, on a logged table.
- commits per action: an in-process drain of approved intents with every transaction counted.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rq import Queue
from rq.registry import StartedJobRegistry
from rq.worker import Worker

from bench.builder import RunSpec, build_and_insert
from bench.commits import counting_transactions
from bench.processes import Children, database_url, rss_bytes, wait_for
from bench.tools import BenchNoop
from control.foundation.queues import execution_queue
from control.models import Tenant
from control.services import member_add, tenant_create
from runs.execution.drain import drain
from runs.models import OPEN_ACTION_STATUSES, Action, Checkpoint, OutboxMessage
from runs.record.outbox import relay
from runs.services import connectors_enable
from runs.tools.errors import UnsupportedTool
from runs.tools.registry import get_tool, register_tool

BENCH_TOOL = "bench.noop"
NOOP_JOB = "bench.jobs.noop"


def ensure_bench_tool() -> None:
    try:
        get_tool(BENCH_TOOL)
    except UnsupportedTool:
        register_tool(BenchNoop())


@dataclass
class BenchTenant:
    tenant: Tenant
    operator: object


def make_bench_tenant(label: str) -> BenchTenant:
    name = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    tenant = tenant_create(name=name, actor="bench")
    # A new tenant reaches no connector: the bench's tools (bench.noop, bench.read), reads
    # run at once as their declarations say.
    ensure_bench_tool()
    connectors_enable(
        tenant=tenant, connectors=["bench"], actor="bench", reads_without_approval=True
    )
    member_add(
        tenant=tenant,
        username=f"{name}-operator",
        role="operator",
        actor="bench",
        password=uuid.uuid4().hex,
    )
    return BenchTenant(tenant, get_user_model().objects.get(username=f"{name}-operator"))


def queue() -> Queue:
    return execution_queue()


def queue_idle() -> bool:
    """Nothing queued, nothing between dequeue and start, nothing running."""
    q = queue()
    return (
        q.count == 0
        and q.connection.llen(q.intermediate_queue_key) == 0
        and StartedJobRegistry(queue=q).count == 0
    )


def queue_clear() -> None:
    """Once the section's workers stopped: drops its queued jobs, and any a worker took off
    the queue but was stopped before starting (RQ's intermediate list). Left there, such a
    job would keep the next section's queue from ever looking idle: RQ only fails it at a
    worker's maintenance, minutes later."""
    q = queue()
    q.empty()
    q.connection.delete(q.intermediate_queue_key)


def check_quiet() -> None:
    """Refuses to run beside live workers or queued work: they would share the load."""
    q = queue()
    listening = [w.name for w in Worker.all(queue=q)]
    if listening:
        raise RuntimeError(f"workers already listen on {q.name!r}: {listening}; stop them first")
    if q.count:
        raise RuntimeError(f"queue {q.name!r} holds {q.count} jobs; empty it first")


def relay_all(messages: list[OutboxMessage]) -> None:
    """Hands built messages to RQ through the outbox's own relay, as their commits would
    have: the queue then holds exactly the jobs production would have queued."""
    relay(OutboxMessage.objects.filter(pk__in=[message.pk for message in messages]))


def seed_approved(bench: BenchTenant, count: int) -> None:
    specs = (
        RunSpec(
            tenant=bench.tenant,
            tool=BENCH_TOOL,
            target=f"item-{number}",
            args={"n": number},
            approver=bench.operator,
        )
        for number in range(count)
    )
    _, _, messages = build_and_insert(specs, now=timezone.now())
    relay_all(messages)
    analyze()


def analyze() -> None:
    """ANALYZE after seeding, as autovacuum would after a bulk load where it is on (it is off
    on this project's machine). Without it the planner plans the burst with statistics that
    say the ready queue is empty: measured, 5,000 writes at 326/s and 535/s (1 and 2 workers)
    against 406/s and 811/s on the same data analyzed (docs/PERFORMANCE.md)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def seed_waiting(bench: BenchTenant, count: int) -> list[Action]:
    specs = (
        RunSpec(tenant=bench.tenant, tool=BENCH_TOOL, target=f"item-{n}", args={"n": n})
        for n in range(count)
    )
    build_and_insert(specs, now=timezone.now())
    analyze()
    return list(Action.objects.filter(tenant=bench.tenant).order_by("created_at", "pk"))


def open_count(tenant: Tenant) -> int:
    return Action.objects.filter(tenant=tenant, status__in=OPEN_ACTION_STATUSES).count()


@dataclass
class RqResult:
    workers: int
    jobs: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


def measure_rq(*, count: int, workers: int, timeout: float = 600) -> RqResult:
    check_quiet()
    q = queue()
    with q.connection.pipeline() as pipe:
        q.enqueue_many(
            [Queue.prepare_data(NOOP_JOB, result_ttl=0, failure_ttl=3600)] * count,
            pipeline=pipe,
        )
        pipe.execute()
    children = Children()
    try:
        for _ in range(workers):
            children.start_worker()
        wait_for(lambda: q.count < count, timeout=60, interval=0.002, what="first dequeue")
        first = time.perf_counter()
        wait_for(
            queue_idle,
            timeout=timeout,
            interval=0.005,
            what=f"{count} RQ jobs",
        )
        last = time.perf_counter()
    finally:
        children.stop_all()
        queue_clear()
    return RqResult(workers=workers, jobs=count, seconds=last - first)


@dataclass
class DbosResult:
    processes: int
    workflows: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.workflows / self.seconds if self.seconds else 0.0


def dbos_database_url() -> str:
    return database_url("default").replace("postgres://", "postgresql://", 1) + "_dbos_sys"


def measure_dbos(*, count: int, processes: int, timeout: float = 600) -> DbosResult:
    """DBOS one-step workflows; its system database sits on the same PostgreSQL server."""
    per_process = max(1, count // processes)
    start_at = time.time() + 8.0  # DBOS.launch() takes a few seconds per process
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.dbos_run",
                dbos_database_url(),
                str(per_process),
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    spans = []
    for child in children:
        out, err = child.communicate(timeout=timeout)
        if child.returncode != 0:
            raise RuntimeError(f"dbos_run failed: {err.decode(errors='replace')[-2000:]}")
        first, last, _ = out.decode().split()
        spans.append((float(first), float(last)))
    seconds = max(last for _, last in spans) - min(first for first, _ in spans)
    return DbosResult(processes=processes, workflows=per_process * processes, seconds=seconds)


def measure_commit_ceiling(*, count: int) -> float:
    """Single-row autocommit INSERTs per second from this one process."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial, v int)")
        cursor.execute("TRUNCATE bench_commit_probe")
        started = time.perf_counter()
        for number in range(count):
            cursor.execute("INSERT INTO bench_commit_probe (v) VALUES (%s)", [number])
        seconds = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_commit_probe")
    return count / seconds


@dataclass
class PreparedDatabase:
    autovacuum: str  # the server's setting, "on" or "off"
    seconds: float  # VACUUM ANALYZE of the whole database


def database_prepare() -> PreparedDatabase:
    """VACUUM ANALYZE the bench's database before measuring: where autovacuum is off (as on
    this project's machine), the planner would otherwise see the tables as the last session
    left them. Returns the autovacuum setting, which the table reports."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        (autovacuum,) = cursor.fetchone()
        started = time.perf_counter()
        cursor.execute("VACUUM ANALYZE")
    return PreparedDatabase(autovacuum=autovacuum, seconds=time.perf_counter() - started)


@dataclass
class CommitsResult:
    actions: int
    transactions: int
    writes: int
    statements: int
    checkpoints: int  # signed during the drain

    @property
    def writes_per_action(self) -> float:
        return self.writes / self.actions

    @property
    def transactions_per_action(self) -> float:
        return self.transactions / self.actions

    @property
    def statements_per_action(self) -> float:
        return self.statements / self.actions

    @property
    def checkpoints_per_action(self) -> float:
        return self.checkpoints / self.actions


def measure_commits_per_action(*, count: int) -> CommitsResult:
    """Drains `count` approved intents in this process, counting every transaction."""
    ensure_bench_tool()
    check_quiet()
    bench = make_bench_tenant("commits")
    seed_approved(bench, count)
    queue().empty()  # the jobs would only repeat the drain below
    checkpoints = Checkpoint.objects.filter(run__tenant=bench.tenant)
    checkpoints_before = checkpoints.count()
    with counting_transactions() as counted:
        done = 0
        while done < count:
            drained = drain(worker=f"bench-commits-{uuid.uuid4().hex[:6]}", limit=count - done)
            if not drained:
                break
            done += drained
    succeeded = Action.objects.filter(tenant=bench.tenant, status="succeeded").count()
    if succeeded != count:
        raise RuntimeError(f"only {succeeded} of {count} intents succeeded in the drain")
    return CommitsResult(
        count,
        counted.transactions,
        counted.writes,
        counted.statements,
        checkpoints=checkpoints.count() - checkpoints_before,
    )


@dataclass
class PageResult:
    path: str
    queries: int
    milliseconds: float  # median server time over the repetitions
    status: int


def measure_pages(*, tenant: Tenant, paths: list[str], repeat: int = 5) -> list[PageResult]:
    """Renders pages in this process as an operator of `tenant` would see them: the number
    of queries and the median server time (request in, response out, no network)."""
    # A host every deployment allows (the test client's "testserver" is allowed only in tests).
    host = next((h for h in settings.ALLOWED_HOSTS if "*" not in h), "localhost").lstrip(".")
    client = Client(HTTP_HOST=host)
    client.cookies[settings.SESSION_COOKIE_NAME] = operator_session(tenant)
    results = []
    for path in paths:
        client.get(path)  # warm the template cache and the database's buffers
        times, queries, status = [], 0, 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
            queries, status = len(captured), response.status_code
        results.append(PageResult(path, queries, statistics.median(times), status))
    return results


def operator_session(tenant: Tenant) -> str:
    """A session cookie value of an operator of `tenant` (the session lives in the database,
    so another process on the same database accepts it)."""
    username = f"bench-pages-{tenant.pk.hex[:8]}"
    if not get_user_model().objects.filter(username=username).exists():
        member_add(
            tenant=tenant,
            username=username,
            role="operator",
            actor="bench",
            password=uuid.uuid4().hex,
        )
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def measure_web_rss(*, paths: list[str], tenant: Tenant) -> int:
    """RSS of a `runserver --noreload` process (what the Dockerfile runs) after it served
    `paths` to a logged-in operator, three times each."""
    cookies = {settings.SESSION_COOKIE_NAME: operator_session(tenant)}
    children = Children()
    port = 18000 + uuid.uuid4().int % 1000
    process = children.start(
        ["manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        COUNTERSIGN_BENCH_CONN_MAX_AGE="0",
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                return requests.get(base + "/healthz", timeout=1).status_code in (200, 503)
            except requests.RequestException:
                return False

        wait_for(answers, timeout=60, interval=0.2, what="the web process")
        for path in paths:
            for _ in range(3):
                requests.get(base + path, timeout=30, cookies=cookies)
        return rss_bytes(process.pid)
    finally:
        children.stop_all()
