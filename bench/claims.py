"""The worker's two claim queries, exactly as `claim_ready` issues them: their plans and cost.

`claim_ready` (runs/execution/worker.py) reads the ready queue, then what crashed workers
left in flight, each `SELECT ... FOR UPDATE SKIP LOCKED LIMIT n`. Here the same querysets
are compiled and run on their own (each in a transaction, as a claim is), so the bench can
say whether they stay index-backed, and as cheap, with history in the table.
"""

from __future__ import annotations

import statistics
import time

from django.db import connection, transaction

from runs.execution.worker import claiming, ready_to_claim
from runs.selectors import orphaned_actions

BATCH = 20


def claim_queries() -> dict[str, tuple[str, list]]:
    """name -> (sql, params) of the ready and the orphaned claim, as claim_ready sends them."""
    querysets = {"ready": ready_to_claim(), "orphaned": orphaned_actions()}
    with transaction.atomic():  # FOR UPDATE compiles only inside a transaction
        return {
            name: claiming(actions, BATCH).query.sql_with_params()
            for name, actions in querysets.items()
        }


def explain_claims() -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of both claims (rows are locked for the statement's
    transaction only)."""
    parts = []
    for name, (sql, params) in claim_queries().items():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            parts.append(f"{name}:\n" + "\n".join(row[0] for row in cursor.fetchall()))
    return "\n".join(parts)


def claim_milliseconds(*, repeat: int = 50) -> dict[str, float]:
    """The median time of each claim query, each run in a transaction of its own."""
    medians = {}
    for name, (sql, params) in claim_queries().items():
        times = []
        for _ in range(repeat):
            with transaction.atomic(), connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute(sql, params)
                cursor.fetchall()
                times.append((time.perf_counter() - started) * 1000)
        medians[name] = statistics.median(times)
    return medians
