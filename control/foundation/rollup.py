"""Counts kept by the database for `/metrics`, so a scrape reads a few rows, not history.

An app declares what a row of one of its tables counts for (`Counted`: a SELECT of
`(metric, label_a, label_b, value)` facts about one row) and installs it in a migration
with `Counted.operation()` (control/migrations/_rollup_triggers.py, frozen with the
migrations that ran it). That creates row triggers that append the row's facts to
`control_metriccount` on INSERT, their negation on DELETE, and both on an UPDATE that
changes a counted column: in the very transaction that changes the row, whatever wrote it
(a service, a bulk `update()`, the bench's SQL, psql). Writers only append, so concurrent
workers never wait on a shared counter row and cannot deadlock on one.

`fold()` replaces the appended changes with one row per (metric, labels); the sweep folds on
every pass, and a scrape sums what is there (`totals()`), so its cost is the number of
label sets plus the changes since the last fold, whatever the size of the counted tables.

Drift: the counts equal a fresh COUNT as long as every change to a counted table fires its
triggers. What fires none: TRUNCATE of a counted table alone (the test suite's flush
truncates this table with it), `session_replication_role = replica` (pg_restore of data
only, logical replication), and a trigger someone disabled or dropped. PostgreSQL rebuilds
every count from the rows with `SELECT countersign_rollup_rebuild();` (its own transaction;
it holds each counted table in SHARE mode, so writers wait while it counts).

Changing what a table counts means a new migration with a new `Counted` (its operation
recounts); editing an applied one changes no database.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from django.db import connection, transaction

# What the installed triggers and recount functions append and lock (frozen with them).
from control.migrations._rollup_triggers import FOLD_LOCK, INSERT

# A scrape that read more rows than this folds them for the next one; the sweep folds on
# every pass, so a scrape seldom does.
FOLD_AFTER = 1_000


# One statement, one snapshot: the changes it deletes are exactly those it sums, and rows
# that writers append meanwhile stay for the next fold. The lock is tried once (InitPlan);
# a fold that loses to a recount or another fold does nothing, and so does one that finds
# every count already a single row (no write, no commit to flush).
_FOLD_POSTGRESQL = f"""
WITH lock AS MATERIALIZED (SELECT pg_try_advisory_xact_lock({FOLD_LOCK}) AS held),
moved AS (
    DELETE FROM control_metriccount
    WHERE EXISTS (
        SELECT FROM control_metriccount GROUP BY metric, label_a, label_b HAVING COUNT(*) > 1
    ) AND (SELECT held FROM lock)
    RETURNING metric, label_a, label_b, value
)
{INSERT}
SELECT metric, label_a, label_b, SUM(value) FROM moved
GROUP BY metric, label_a, label_b HAVING SUM(value) <> 0
"""

_TOTALS = """
SELECT metric, label_a, label_b, SUM(value), COUNT(*) FROM control_metriccount
GROUP BY metric, label_a, label_b HAVING SUM(value) <> 0
ORDER BY metric, label_a, label_b
"""


def fold() -> None:
    """Replaces the appended changes with their sums, one row per (metric, labels)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_FOLD_POSTGRESQL)
            return
        # SQLite has one writer at a time: the two statements see the same rows.
        with transaction.atomic():
            cursor.execute("SELECT MAX(id) FROM control_metriccount")
            (last,) = cursor.fetchone()
            if last is None:
                return
            cursor.execute(
                f"{INSERT} SELECT metric, label_a, label_b, SUM(value) FROM control_metriccount"
                " WHERE id <= %s GROUP BY metric, label_a, label_b HAVING SUM(value) <> 0",
                [last],
            )
            cursor.execute("DELETE FROM control_metriccount WHERE id <= %s", [last])


class Totals:
    """Every non-zero count, by metric, each metric's rows ordered by its labels."""

    def __init__(self, rows: Sequence[tuple[str, str, str, int, int]]) -> None:
        self._by_metric: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
        self.unfolded = 0
        for metric, label_a, label_b, value, changes in rows:
            self._by_metric[metric].append((label_a, label_b, int(value)))
            self.unfolded += changes - 1

    def rows(self, metric: str) -> list[tuple[str, str, int]]:
        return self._by_metric.get(metric, [])


def totals() -> Totals:
    """Every count, summed from the rows there: one statement, reading one row per count
    plus the changes appended since the last fold (a second statement folds them when they
    pile up past FOLD_AFTER)."""
    with connection.cursor() as cursor:
        cursor.execute(_TOTALS)
        found = Totals(cursor.fetchall())
    if found.unfolded > FOLD_AFTER:
        fold()
    return found
