"""Smoke tests of the benchmark, volume seeding and soak commands at tiny sizes.

They prove each command works end to end and reports what it should; they assert no
timing (benchmarks are never timed assertions).
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from rq import Queue

from bench.builder import AGENT, RunSpec, build_and_insert, build_run, insert_built
from bench.commits import counting_transactions
from bench.measure import (
    NOOP_JOB,
    ensure_bench_tool,
    make_bench_tenant,
    measure_commits_per_action,
    measure_pages,
    queue_clear,
    queue_idle,
)
from bench.tools import BenchNoop
from control.models import Tenant
from runs.execution.drain import drain
from runs.models import Action, Run, RunEvent
from runs.record.carry import build_state
from runs.record.checkpoints import sign_state
from runs.record.verification import run_verify
from runs.services import observation_record
from runs.tools.registry import unregister_tool
from tests.factories import approve, make_action, make_run


@pytest.fixture
def noop_tool():
    ensure_bench_tool()
    yield
    unregister_tool(BenchNoop())


def test_a_job_taken_off_the_queue_but_never_started_is_not_idle_and_is_cleared(redis_queue):
    """A worker stopped between RQ's dequeue and the job's start leaves the job in RQ's
    intermediate list; the rq section once ended there and the next section waited for an
    idle queue that never came."""
    redis_queue.enqueue(NOOP_JOB)
    assert not queue_idle()
    taken = Queue.dequeue_any([redis_queue], timeout=None, connection=redis_queue.connection)
    assert taken is not None
    assert redis_queue.count == 0
    assert not queue_idle()

    queue_clear()

    assert queue_idle()


@pytest.mark.django_db
def test_built_runs_are_what_the_services_would_have_written(noop_tool):
    bench = make_bench_tenant("built")
    specs = [
        RunSpec(tenant=bench.tenant, tool="bench.noop", target="item-1", args={"n": 1}),
        RunSpec(
            tenant=bench.tenant,
            tool="bench.noop",
            target="item-2",
            args={"n": 2},
            approver=bench.operator,
            observations=4,
        ),
        RunSpec(tenant=bench.tenant, tool=None, observations=7),
    ]
    runs, events, messages = build_and_insert(specs, now=timezone.now())

    assert (runs, events, len(messages)) == (3, 3 + 7 + 8, 1)
    for run in Run.objects.filter(tenant=bench.tenant):
        assert run_verify(run) == []
        assert run.checkpoints.get().body == sign_state(build_state(run))[1]
    assert {r.phase for r in Run.objects.filter(tenant=bench.tenant)} == {
        "waiting_approval",
        "executing",
        "running",
    }
    assert drain(worker="smoke", limit=5) == 1
    assert Action.objects.get(tenant=bench.tenant, target="item-2").status == "succeeded"


def _recorded(run: Run) -> list[tuple]:
    """The run's events as (type, actor, action, payload, changes) in seq order, with what is
    the run's own (its id, its observation's and action's, the key derived from the run id)
    replaced by a name, so that two runs that did the same things compare equal."""
    action = run.actions.get()
    own = {
        str(run.pk): "<run>",
        str(run.observations.get().pk): "<observation>",
        str(action.pk): "<action>",
        action.idempotency_key: "<idempotency key>",
    }

    def plain(value):
        if isinstance(value, dict):
            return {name: plain(item) for name, item in value.items()}
        if isinstance(value, list):
            return [plain(item) for item in value]
        return own.get(value, value) if isinstance(value, str) else value

    return [
        (
            event.type,
            event.actor,
            plain(str(event.action_id)) if event.action_id else None,
            plain(event.payload),
            plain(event.changes),
        )
        for event in run.events.order_by("seq")
    ]


@pytest.mark.django_db
def test_a_built_run_records_the_events_the_services_record_one_by_one(noop_tool):
    bench = make_bench_tenant("same-events")
    spec = RunSpec(
        tenant=bench.tenant,
        tool="bench.noop",
        target="item-1",
        args={"n": 1},
        approver=bench.operator,
    )
    built = build_run(spec, now=timezone.now())
    insert_built([built])
    # The services get exactly what the builder gave itself; only what they mint differs.
    (seen,) = built.observations
    run = make_run(bench.tenant, goal=spec.goal, created_by=AGENT)
    observation = observation_record(
        run=run,
        source=seen.source,
        ref=seen.ref,
        content_hash=seen.content_hash,
        summary=seen.summary,
        actor=AGENT,
    )
    action = make_action(
        run,
        action_id=spec.action_id,
        tool=spec.tool,
        target=spec.target,
        args=spec.args,
        observation=observation,
        proposed_by=AGENT,
    )
    approve(action, bench.operator)

    expected = _recorded(run)
    assert [kind for kind, *_ in expected] == [
        "run.started",
        "observation.recorded",
        "action.proposed",
        "action.approved",
    ]
    assert _recorded(Run.objects.get(pk=built.run.pk)) == expected


@pytest.mark.django_db(transaction=True)
def test_a_transaction_with_writes_counts_once_and_autocommit_reads_count_as_reads():
    with counting_transactions() as counted:
        Tenant.objects.count()
        with transaction.atomic():
            Tenant.objects.create(name="counted-1")
            Tenant.objects.create(name="counted-2")
            with transaction.atomic():
                Tenant.objects.filter(name="counted-1").update(name="counted-3")
        try:
            with transaction.atomic():
                Tenant.objects.create(name="rolled-back")
                raise RuntimeError("rolled back: not a commit")
        except RuntimeError:
            pass
        Tenant.objects.filter(name="nobody").count()

    assert counted.transactions == 3
    assert counted.writes == 1


@pytest.mark.django_db(transaction=True)
def test_the_commits_measure_counts_the_checkpoints_the_drain_signed(redis_queue, noop_tool):
    measured = measure_commits_per_action(count=6)

    # One claim, one batch: its attempts begin in one transaction (rows only), its receipts
    # in another, and each run gets one checkpoint: its action succeeded.
    assert measured.checkpoints == 6
    assert measured.writes_per_action <= 0.5, measured


@pytest.mark.django_db
def test_seed_volume_seeds_runs_that_verify_and_pages_stay_at_a_fixed_query_count():
    out = io.StringIO()
    call_command(
        "seed_volume",
        tenant="volume-smoke",
        approvals=60,
        events=800,
        history_runs=4,
        jobs=1,
        stdout=out,
    )

    tenant = Tenant.objects.get(name="volume-smoke")
    assert "seeded" in out.getvalue()
    assert Action.objects.filter(tenant=tenant, status="waiting_approval").count() == 60
    assert RunEvent.objects.filter(run__tenant=tenant).count() >= 800
    for run in Run.objects.filter(tenant=tenant)[:10]:
        assert run_verify(run) == []
    pages = measure_pages(tenant=tenant, paths=["/inbox/", "/runs/"], repeat=1)
    assert [page.status for page in pages] == [200, 200]
    # The inbox counts its waiting plans apart from single requests: 11 queries at any size.
    assert all(page.queries <= 11 for page in pages), pages


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_the_bench_command_measures_each_section_at_a_tiny_size(redis_queue, noop_tool, read_tool):
    call_command(
        "seed_volume", tenant="volume-tiny", approvals=5, events=40, history_runs=1, jobs=1
    )
    out = io.StringIO()
    call_command(
        "bench",
        writes=8,
        workers="1",
        rq_jobs=20,
        ceiling_commits=50,
        commit_sample=5,
        latency_samples=4,
        long_run_reads=20,
        long_run_writes=5,
        pages_tenant="volume-tiny",
        skip="dbos",
        stdout=out,
        stderr=io.StringIO(),
    )

    table = out.getvalue()
    for figure in (
        "approved writes/s, 1 worker(s)",
        "bare RQ jobs/s, 1 worker(s)",
        "writes / bare RQ jobs, 1 worker(s)",
        "single-row commits/s",
        "write commits per action",
        "checkpoints signed per action",
        "VACUUM ANALYZE before measuring",
        "approval-to-dispatch p99",
        "worker RSS",
        "/inbox/ queries",
        "/runs/ server time",
        "web process RSS",
        "long run: largest checkpoint",
        "long run: step cost",
    ):
        assert figure in table, table


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_the_bench_measures_writes_with_seeded_history_against_the_empty_table_and_removes_it(
    redis_queue, noop_tool
):
    out = io.StringIO()
    call_command(
        "bench",
        writes=6,
        workers="1",
        history=200,
        skip="rq,dbos,ceiling,commits,latency,pages,rss,long_run",
        stdout=out,
        stderr=io.StringIO(),
    )

    table = out.getvalue()
    assert "approved writes/s, 1 worker(s)  " in table, table
    assert "approved writes/s, 1 worker(s), 200 history" in table, table
    assert "approved writes/s, 1 worker(s), history removed" in table, table
    assert "writes/s with 200 history / empty, 1 worker(s)" in table, table
    for claim in ("ready claim, median", "orphaned claim, median"):
        assert f"{claim}  " in table, table
        assert f"{claim}, 200 history" in table, table
    (seeded,) = [line for line in table.splitlines() if line.startswith("history seeded")]
    assert " 200 actions " in seeded, seeded
    # The sizes measured at: the first writes tenant's 6 writes are in the table, then the
    # history's 200 copies and their template too.
    assert "; 0 actions in the table at the start" in table, table
    assert "; 207 actions in the table at the start" in table, table
    # Removed before the last measurement: the template (it has a receipt) and the three
    # measurements' writes stay behind.
    assert "; 13 actions in the table at the start" in table, table
    (history,) = Tenant.objects.filter(name__startswith="bench-history-")
    assert Action.objects.filter(tenant=history).count() == 1
    assert Run.objects.filter(tenant=history).count() == 1
    assert Action.objects.filter(status="succeeded").count() == 6 + 1 + 6 + 6


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_the_soak_finds_no_violation_with_a_few_runs_kills_and_a_redis_flush(sandbox, redis_queue):
    out = io.StringIO()
    call_command(
        "soak",
        runs=24,
        waves=3,
        kills=1,
        redis_flushes=1,
        postgres_restart=False,
        sandbox_url=sandbox,
        settle_timeout=90,
        stdout=out,
        verbosity=0,
    )

    table = out.getvalue()
    assert "soak: no violation" in table
    assert "intents with duplicate effects  0" in table
