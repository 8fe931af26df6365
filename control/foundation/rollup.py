"""Counts kept by the database for `/metrics`, so a scrape reads a few rows, not history.

An app declares what a row of one of its tables counts for (`Counted`: a SELECT of
`(metric, label_a, label_b, value)` facts about one row) and installs it in a migration
with `Counted.operation()`. That creates row triggers that append the row's facts to
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connection, migrations, transaction

# A scrape that read more rows than this folds them for the next one; the sweep folds on
# every pass, so a scrape seldom does.
FOLD_AFTER = 1_000

# The advisory lock a fold tries and a recount waits for: a fold that moved rows while a
# recount deleted them would survive the recount and count twice.
FOLD_LOCK = 7_464_110_017

INSERT = "INSERT INTO control_metriccount (metric, label_a, label_b, value)"

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

REBUILD_FUNCTION = r"""
CREATE FUNCTION countersign_rollup_rebuild() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    recount regproc;
    done integer := 0;
BEGIN
    FOR recount IN
        SELECT p.oid::regproc FROM pg_proc p
        WHERE p.proname LIKE 'countersign\_recount\_%'
          AND p.pronamespace = current_schema()::regnamespace
        ORDER BY p.proname
    LOOP
        EXECUTE format('SELECT %s()', recount);
        done := done + 1;
    END LOOP;
    RETURN done;
END $$
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


# (metric, label_a, label_b, value): SQL expressions about one row.
Fact = tuple[str, str, str, str]


@dataclass(frozen=True)
class Counted:
    """What each row of `table` counts for: `facts(row, vendor)` are the row's facts as SQL
    expressions over `row` (NEW, OLD or a table alias), each metric one of `metrics`; they
    change only when one of `columns` does."""

    table: str
    metrics: tuple[str, ...]
    columns: tuple[str, ...]
    facts: Callable[[str, str], list[Fact]]

    @classmethod
    def rows_by(cls, table: str, metric: str, *labels: str) -> Counted:
        """Rows counted by one or two of their columns."""

        def facts(row: str, vendor: str) -> list[Fact]:
            named = [f"{row}.{column}" for column in labels]
            label_a, label_b = (*named, "''")[:2]
            return [(f"'{metric}'", label_a, label_b, "1")]

        return cls(table=table, metrics=(metric,), columns=labels, facts=facts)

    @property
    def name(self) -> str:
        return f"countersign_count_{self.table}"

    def _append(self, row: str, vendor: str, sign: str = "") -> str:
        values = ", ".join(
            f"({metric}, {label_a}, {label_b}, {sign}({value}))"
            for metric, label_a, label_b, value in self.facts(row, vendor)
        )
        return f"{INSERT} VALUES {values};"

    def _count_rows(self, vendor: str) -> str:
        every = " UNION ALL ".join(
            f"SELECT {metric} AS metric, {label_a} AS label_a, {label_b} AS label_b, "
            f"{value} AS value FROM {self.table} AS t"
            for metric, label_a, label_b, value in self.facts("t", vendor)
        )
        return (
            f"{INSERT} SELECT metric, label_a, label_b, SUM(value) FROM ({every}) AS f "
            "GROUP BY metric, label_a, label_b HAVING SUM(value) <> 0"
        )

    def _forget(self) -> str:
        names = ", ".join(f"'{metric}'" for metric in self.metrics)
        return f"DELETE FROM control_metriccount WHERE metric IN ({names})"

    def _update_trigger(self, vendor: str) -> str:
        distinct = "IS DISTINCT FROM" if vendor == "postgresql" else "IS NOT"
        changed = " OR ".join(f"OLD.{column} {distinct} NEW.{column}" for column in self.columns)
        return (
            f"CREATE TRIGGER {self.name}_change AFTER UPDATE OF {', '.join(self.columns)} "
            f"ON {self.table} FOR EACH ROW WHEN ({changed})"
        )

    def _postgresql(self) -> list[str]:
        function = f"""
CREATE FUNCTION {self.name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        {self._append("OLD", "postgresql", "-")}
    END IF;
    IF TG_OP <> 'DELETE' THEN
        {self._append("NEW", "postgresql")}
    END IF;
    RETURN NULL;
END $$"""
        recount = f"""
CREATE FUNCTION countersign_recount_{self.table}() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE {self.table} IN SHARE MODE;
    PERFORM pg_advisory_xact_lock({FOLD_LOCK});
    {self._forget()};
    {self._count_rows("postgresql")};
END $$"""
        return [
            function,
            f"CREATE TRIGGER {self.name} AFTER INSERT OR DELETE ON {self.table} "
            f"FOR EACH ROW EXECUTE FUNCTION {self.name}()",
            f"{self._update_trigger('postgresql')} EXECUTE FUNCTION {self.name}()",
            recount,
            f"SELECT countersign_recount_{self.table}()",
        ]

    def _sqlite(self) -> list[str]:
        on = f"ON {self.table} FOR EACH ROW"
        return [
            f"CREATE TRIGGER {self.name}_insert AFTER INSERT {on} "
            f"BEGIN {self._append('NEW', 'sqlite')} END",
            f"CREATE TRIGGER {self.name}_delete AFTER DELETE {on} "
            f"BEGIN {self._append('OLD', 'sqlite', '-')} END",
            f"{self._update_trigger('sqlite')} BEGIN {self._append('OLD', 'sqlite', '-')} "
            f"{self._append('NEW', 'sqlite')} END",
            self._forget(),
            self._count_rows("sqlite"),
        ]

    def operation(self) -> migrations.RunPython:
        """Installs the triggers and counts the rows already there. CREATE TRIGGER holds the
        table against writers until the migration commits, so none is counted twice or not
        at all."""

        def install(apps, schema_editor) -> None:
            vendor = schema_editor.connection.vendor
            for statement in self._postgresql() if vendor == "postgresql" else self._sqlite():
                schema_editor.execute(statement, params=None)

        def remove(apps, schema_editor) -> None:
            if schema_editor.connection.vendor == "postgresql":
                schema_editor.execute(f"DROP TRIGGER {self.name} ON {self.table}")
                schema_editor.execute(f"DROP TRIGGER {self.name}_change ON {self.table}")
                schema_editor.execute(f"DROP FUNCTION {self.name}()")
                schema_editor.execute(f"DROP FUNCTION countersign_recount_{self.table}()")
            else:
                for suffix in ("insert", "delete", "change"):
                    schema_editor.execute(f"DROP TRIGGER {self.name}_{suffix}")
            schema_editor.execute(self._forget())

        return migrations.RunPython(install, remove)
