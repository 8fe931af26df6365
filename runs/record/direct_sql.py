"""The batched protocol's hot statements, sent through psycopg directly.

A batch's transactions (runs.execution.batch) send the same few writes for every twenty
actions. Through the ORM each costs Python to build, compile and convert: a bulk_create's
model handling and its UNNEST arrays dumped element by element, a filter's lookups. Here each
is SQL text with PostgreSQL's own `$n` placeholders whose parameters the server binds (a
psycopg `RawCursor`: psycopg neither parses the text, which it would do again for every
statement of over 50 parameters, nor quotes the values, as the client-binding cursor Django
uses does), sent on Django's own connection inside its transaction and through its cursor
wrapper, so `execute_wrapper` hooks and query logging see every statement.

`UPDATE ... FROM (VALUES ...)` also says what the ORM cannot say in one statement: different
values on many rows at once, each row guarded by its own expected value (the compare-and-set
of every run a batch advances; Django would need a CASE per column and row, measured at
~100 ms to compile for 20 runs).

On any other database (SQLite, the demo's default) each function takes the ORM's form.
"""

from __future__ import annotations

import psycopg
from django.db import connection
from django.db.models import F, Model
from django.db.models.functions import Now

from runs.models import Action, Run


def _postgresql() -> bool:
    return connection.vendor == "postgresql"


def _cursor():
    """A raw (`$n` placeholders) cursor on Django's connection, wrapped as Django wraps its
    own (its errors are Django's: an IntegrityError is django.db.IntegrityError)."""
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(psycopg.RawCursor(connection.connection))


def rows_insert(
    objects: list[Model], *, conflict: tuple[list[str], list[str]] | None = None
) -> list[Model]:
    """bulk_create of `objects` (one model) in one INSERT ... VALUES: every concrete field
    but an auto primary key, after the fields' pre_save (auto_now_add); each object gets its
    auto primary key back. `conflict` = (unique fields, fields to update) makes it an upsert,
    as bulk_create(update_conflicts=True) does."""
    if not objects:
        return objects
    model = type(objects[0])
    if not _postgresql():
        options = {}
        if conflict:
            unique, update = conflict
            options = {"update_conflicts": True, "unique_fields": unique, "update_fields": update}
        return model.objects.bulk_create(objects, **options)
    meta = model._meta
    quote = connection.ops.quote_name
    auto_pk = meta.pk.db_returning
    columns = [field for field in meta.concrete_fields if not (auto_pk and field.primary_key)]
    width = len(columns)
    rows = ", ".join(_row(number * width, width) for number in range(len(objects)))
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(c.column) for c in columns)}) "
        f"VALUES {rows}"
    )
    if conflict:
        unique, update = ([quote(meta.get_field(n).column) for n in names] for names in conflict)
        sql += f" ON CONFLICT ({', '.join(unique)}) DO UPDATE SET " + ", ".join(
            f"{column} = EXCLUDED.{column}" for column in update
        )
    if auto_pk:
        sql += f" RETURNING {quote(meta.pk.column)}"
    params = [
        column.get_db_prep_save(column.pre_save(obj, add=True), connection)
        for obj in objects
        for column in columns
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)
        if auto_pk:
            for obj, (pk,) in zip(objects, cursor.fetchall(), strict=True):
                obj.pk = pk
    for obj in objects:
        obj._state.adding = False
        obj._state.db = connection.alias
    return objects


def actions_move(
    pks: list, *, expected: set[str], status: str, attempt_begun: bool = False, **fields
) -> int:
    """Moves the actions `pks` from a status of `expected` to `status` with `fields` set (and
    attempt_count one higher with `attempt_begun`), updated_at the statement's time: one
    compare-and-set UPDATE. Returns how many moved."""
    if not _postgresql():
        extra = {"attempt_count": F("attempt_count") + 1} if attempt_begun else {}
        return Action.objects.filter(pk__in=pks, status__in=expected).update(
            status=status, updated_at=Now(), **fields, **extra
        )
    quote = connection.ops.quote_name
    meta = Action._meta
    assigned = ["status = $1", "updated_at = STATEMENT_TIMESTAMP()"]
    assigned += [
        f"{quote(meta.get_field(name).column)} = ${number}"
        for number, name in enumerate(fields, start=2)
    ]
    values = [meta.get_field(name).get_db_prep_save(v, connection) for name, v in fields.items()]
    if attempt_begun:
        assigned.append("attempt_count = attempt_count + 1")
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assigned)} "
        f"WHERE id = ANY(${len(fields) + 2}) AND status = ANY(${len(fields) + 3})"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [status, *values, list(pks), sorted(expected)])
        return cursor.rowcount


def runs_compare_and_set(rows: list[dict], *, fields: list[str]) -> int:
    """Sets `fields` of each run to its row's values where the run's state_version is still
    the row's `expected`; each row holds "id", "expected" and the fields. Returns how many
    runs were updated (fewer than the rows: some moved since they were read)."""
    if not _postgresql():
        return sum(
            Run.objects.filter(pk=row["id"], state_version=row["expected"]).update(
                **{name: row[name] for name in fields}
            )
            for row in rows
        )
    meta = Run._meta
    quote = connection.ops.quote_name
    columns = [meta.pk, meta.get_field("state_version")] + [meta.get_field(f) for f in fields]
    names = ["id", "expected", *fields]
    types = [column.cast_db_type(connection) for column in columns]
    values = ", ".join(
        _row(number * len(types), len(types), types=types) for number in range(len(rows))
    )
    assigned = ", ".join(
        f"{quote(meta.get_field(name).column)} = v.{quote(name)}" for name in fields
    )
    sql = (
        f"UPDATE {quote(meta.db_table)} AS r SET {assigned} "
        f"FROM (VALUES {values}) AS v({', '.join(quote(n) for n in names)}) "
        f"WHERE r.{quote(meta.pk.column)} = v.{quote('id')} "
        f"AND r.{quote(meta.get_field('state_version').column)} = v.{quote('expected')}"
    )
    params = [
        column.get_db_prep_value(row[name], connection, prepared=False)
        for row in rows
        for column, name in zip(columns, names, strict=True)
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _row(before: int, width: int, *, types: list[str] | None = None) -> str:
    """`($n, ...)`: a row of `width` parameters after `before` others, each cast to its entry
    of `types` when given."""
    casts = [f"::{name}" for name in types] if types else [""] * width
    return "(" + ", ".join(f"${before + i + 1}{cast}" for i, cast in enumerate(casts)) + ")"
