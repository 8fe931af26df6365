"""History for the writes section: N settled writes already in the tables, seeded by SQL.

The issue's target is that approved writes/s with 1,000,000 actions in the table is within
10% of an empty table. Going through the services (or even bench.builder) costs tens of ms
a write, hours for a million, so one template is made the real way and copied set-wise:

- the template: one approved `bench.noop` intent built by bench.builder and processed in
  this process by the worker's own `process_action` (claim, attempt, send, receipt), so it
  is exactly a settled write as production leaves it;
- the copies: `INSERT ... SELECT` over `generate_series`, one new run (with its lease), one
  succeeded action and one succeeded attempt per history item, each under fresh UUIDs and
  its own idempotency key, in one transaction with the foreign-key triggers skipped (the
  parents are inserted just before); then `VACUUM ANALYZE`, so the planner knows the new
  sizes. A million copies take about two minutes on the 2-core machine.

Everything lives in a dedicated tenant (`bench-history-...`), whose rows nothing but this
module reads. Only the tables whose rows may be deleted are copied into (runs, leases,
actions, attempts): events and receipts are insert-only by trigger (runs migration 0002),
so history seeded there could never be removed again, and copies of one run's events would
not verify anyway (the hash chain and the signed checkpoint bind the run id). So a copy has
no events, checkpoint, observation, approval or receipt, and the history weighs on the
action, attempt, run and lease tables only. `history_remove` deletes the copies (the
template stays: it has a receipt) and rewrites the four tables (`VACUUM FULL ANALYZE`), so
later sections and later bench runs measure the tables as they found them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from django.db import DatabaseError, connection, models, transaction
from django.utils import timezone

from bench.builder import RunSpec, build_run, copy_fields, insert_built
from bench.measure import BENCH_TOOL, BenchTenant, ensure_bench_tool, make_bench_tenant
from runs.execution.worker import process_action
from runs.models import Action, Attempt, Lease, Run
from runs.services import lease_claim

TEMPLATE_WORKER = "bench-history"
# The tables a history item has rows in, children last (removal goes the other way).
TABLES = (Run, Lease, Action, Attempt)


@dataclass
class History:
    bench: BenchTenant
    template_run_id: str
    actions: int  # copies seeded (the template not counted)
    seconds: float  # seeding, VACUUM ANALYZE included


def actions_in_table() -> int:
    """How many actions runs_action holds, every tenant's: the size a figure was measured at."""
    return Action.objects.count()


def history_seed(*, count: int) -> History:
    """Seeds `count` settled writes in a new tenant, copies of one processed for real."""
    started = time.perf_counter()
    ensure_bench_tool()
    bench = make_bench_tenant("history")
    template = _settled_template(bench)
    with transaction.atomic(), connection.cursor() as cursor:
        _trust_foreign_keys(cursor)
        # In the order of the run ids, with each action's id sharing its run's prefix: every
        # index on a run, action or attempt id is then written from left to right, not at
        # random pages of a B-tree larger than shared_buffers.
        cursor.execute(
            "CREATE TEMPORARY TABLE bench_history_ids ON COMMIT DROP AS "
            "SELECT run_id, (left(run_id::text, 24) || right(gen_random_uuid()::text, 12))::uuid "
            "AS action_id FROM (SELECT gen_random_uuid() AS run_id "
            "FROM generate_series(1, %s)) AS fresh ORDER BY run_id",
            [count],
        )
        for model in COPIES:
            _copy(cursor, model, template)
    _vacuum_analyze()
    return History(bench, str(template.run_id), count, time.perf_counter() - started)


def history_remove(history: History) -> float:
    """Deletes the copies (children first) and vacuums; returns the seconds it took."""
    started = time.perf_counter()
    copies = "SELECT id FROM runs_run WHERE tenant_id = %s AND id <> %s"
    params = [history.bench.tenant.pk, history.template_run_id]
    with transaction.atomic(), connection.cursor() as cursor:
        _trust_foreign_keys(cursor)
        cursor.execute(
            "DELETE FROM runs_attempt WHERE action_id IN "
            f"(SELECT id FROM runs_action WHERE run_id IN ({copies}))",
            params,
        )
        cursor.execute(f"DELETE FROM runs_action WHERE run_id IN ({copies})", params)
        cursor.execute(f"DELETE FROM runs_lease WHERE run_id IN ({copies})", params)
        cursor.execute(f"DELETE FROM runs_run WHERE id IN ({copies})", params)
    _vacuum_analyze(full=True)
    return time.perf_counter() - started


def _settled_template(bench: BenchTenant) -> Action:
    """One approved intent, processed by the worker's own code in this process (no job: the
    outbox message is left out, so no drain is queued for it)."""
    spec = RunSpec(
        tenant=bench.tenant,
        tool=BENCH_TOOL,
        target="history-template",
        args={"n": 0},
        approver=bench.operator,
    )
    built = build_run(spec, now=timezone.now())
    built.outbox = None
    insert_built([built])
    lease = lease_claim(run_id=built.run.pk, owner=TEMPLATE_WORKER)
    process_action(action_pk=built.action.pk, lease=lease, worker=TEMPLATE_WORKER)
    action = Action.objects.get(pk=built.action.pk)
    if action.status != Action.Status.SUCCEEDED:
        raise RuntimeError(f"the history template ended {action.status}, not succeeded")
    return action


# Per table: the column the template's row is found by, and the columns a copy does not take
# from the template, as SQL over the template's row (`template.`) and the copy's ids (`ids.`).
COPIES: dict[type[models.Model], tuple[str, dict[str, str]]] = {
    Run: ("id", {"id": "ids.run_id"}),
    Lease: ("run_id", {"run_id": "ids.run_id"}),
    Action: (
        "id",
        {
            "id": "ids.action_id",
            "run_id": "ids.run_id",
            # run_id:action_id:target:version under the copy's run id: unique, as in use
            "idempotency_key": "replace(template.idempotency_key, %(run)s, ids.run_id::text)",
            "observation_id": "NULL",
        },
    ),
    Attempt: ("action_id", {"action_id": "ids.action_id"}),
}


def _copy(cursor, model: type[models.Model], template: Action) -> None:
    """INSERT ... SELECT: one copy of the template's row of `model` per bench_history_ids row,
    in the ids' order."""
    quote = connection.ops.quote_name
    key, overrides = COPIES[model]
    columns = [field.column for field in copy_fields(model)]
    values = [overrides.get(column, f"template.{quote(column)}") for column in columns]
    table = quote(model._meta.db_table)
    cursor.execute(
        f"INSERT INTO {table} ({', '.join(map(quote, columns))}) "
        f"SELECT {', '.join(values)} FROM {table} AS template CROSS JOIN bench_history_ids AS ids "
        f"WHERE template.{quote(key)} = %(template)s ORDER BY ids.run_id",
        {
            "run": str(template.run_id),
            "template": template.run_id if model in (Run, Lease) else template.pk,
        },
    )


def _trust_foreign_keys(cursor) -> None:
    """Skips the foreign-key triggers for the rest of this transaction, where the role may
    (a superuser, as the bench's own database is used): the copies' parents are inserted
    just before them, and nothing but this module ever points at a copy. Checked row by row
    (another role), a million copies cost up to 18 trigger probes each: removing them took
    9 minutes here, against 40 s with the triggers skipped."""
    with contextlib.suppress(DatabaseError), transaction.atomic():
        cursor.execute("SET LOCAL session_replication_role = replica")


def _vacuum_analyze(*, full: bool = False) -> None:
    """Fresh statistics (and visibility) for the planner; FULL rewrites the tables and their
    indexes, which is what returns them to their size before the history: the rows written
    meanwhile sit behind the deleted copies, so a plain VACUUM cannot truncate the files, and
    left at a million rows' size with a hundred rows' statistics the planner chose a
    sequential scan of runs_lease for the ready claim (16 ms instead of 2 ms)."""
    with connection.cursor() as cursor:
        for model in TABLES:
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"VACUUM {'FULL ' if full else ''}ANALYZE {table}")
