"""The SQL the rollup's migrations install (control.foundation.rollup says what it counts).

Frozen: applied migrations ran this code, and a fresh database runs it again, so it must keep
writing exactly the SQL it wrote. It imports nothing of the project. A different trigger
shape is a new function or class here, used by a new migration; never an edit of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import migrations

# The advisory lock a fold tries and a recount waits for: a fold that moved rows while a
# recount deleted them would survive the recount and count twice.
FOLD_LOCK = 7_464_110_017

INSERT = "INSERT INTO control_metriccount (metric, label_a, label_b, value)"

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
