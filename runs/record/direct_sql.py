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

A query whose text and parameters never change (the workers' claims) is compiled by the ORM
once per process (`compiled_rows`): building and compiling the ready claim took ~3 ms, running
it ~0.9 ms.

On any other database (SQLite, the demo's default) each function takes the ORM's form.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import timedelta

import psycopg
from django.db import connection
from django.db.models import DurationField, ExpressionWrapper, F, Model, Q, QuerySet
from django.db.models.functions import Now

from runs.models import Action, Lease, Run, RunEvent


def _postgresql() -> bool:
    return connection.vendor == "postgresql"


def _cursor():
    """A raw (`$n` placeholders) cursor on Django's connection, wrapped as Django wraps its
    own (its errors are Django's: an IntegrityError is django.db.IntegrityError)."""
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(psycopg.RawCursor(connection.connection))


_compiled: dict[Hashable, tuple[str, tuple]] = {}


def compiled_rows(key: Hashable, build: Callable[[], QuerySet]) -> list[tuple]:
    """The rows of `build()`, a values_list query whose SQL and parameters are the same at
    every call (no value of the caller's in it but what `key` names): compiled the first
    time, then only sent. Inside the caller's transaction, as the query would be."""
    if not _postgresql():
        return list(build())
    if key not in _compiled:
        _compiled[key] = build().query.sql_with_params()
    sql, params = _compiled[key]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def rows_insert[M: Model](
    objects: list[M], *, conflict: tuple[list[str], list[str]] | None = None
) -> list[M]:
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
        f"WHERE id = ANY(${len(fields) + 2}::uuid[]) AND status = ANY(${len(fields) + 3})"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [status, *values, list(pks), sorted(expected)])
        return cursor.rowcount


def runs_lock(run_ids: list) -> list[tuple]:
    """(id, state_version) of the runs, their rows locked (FOR NO KEY UPDATE) until the
    caller's transaction ends."""
    if not _postgresql():
        locking = Run.objects.filter(pk__in=run_ids).select_for_update(no_key=True)
        return list(locking.values_list("pk", "state_version"))
    sql = "SELECT id, state_version FROM runs_run WHERE id = ANY($1::uuid[]) FOR NO KEY UPDATE"
    return _rows(sql, [list(run_ids)])


def leases_take(run_ids: list, *, owner: str, seconds: int) -> list[tuple]:
    """Takes the leases of the runs that are free, expired or already `owner`'s, each one
    version higher and `seconds` long by the database's clock: (run id, version) of those."""
    if not _postgresql():
        claimable = Q(expires_at__isnull=True) | Q(expires_at__lte=Now()) | Q(owner=owner)
        Lease.objects.filter(claimable, run_id__in=run_ids).update(
            owner=owner,
            lease_version=F("lease_version") + 1,
            expires_at=Now() + timedelta(seconds=seconds),
        )
        taken = Lease.objects.filter(run_id__in=run_ids, owner=owner)
        return list(taken.values_list("run_id", "lease_version"))
    sql = (
        "UPDATE runs_lease SET owner = $2, lease_version = lease_version + 1, "
        "expires_at = STATEMENT_TIMESTAMP() + make_interval(secs => $3) "
        "WHERE run_id = ANY($1::uuid[]) "
        "AND (expires_at IS NULL OR expires_at <= STATEMENT_TIMESTAMP() OR owner = $2) "
        "RETURNING run_id, lease_version"
    )
    return _rows(sql, [list(run_ids), owner, seconds])


def leases_lock(run_ids: list) -> list[tuple]:
    """(run id, owner, version) of the runs' unexpired leases (by the database's clock),
    their rows locked until the caller's transaction ends."""
    if not _postgresql():
        locking = Lease.objects.filter(run_id__in=run_ids, expires_at__gt=Now())
        rows = locking.select_for_update().values_list("run_id", "owner", "lease_version")
        return list(rows)
    sql = (
        "SELECT run_id, owner, lease_version FROM runs_lease "
        "WHERE run_id = ANY($1::uuid[]) AND expires_at > STATEMENT_TIMESTAMP() FOR UPDATE"
    )
    return _rows(sql, [list(run_ids)])


def leases_expire(run_ids: list, *, seconds: int = 0) -> None:
    """The runs' leases expire `seconds` from now by the database's clock (0: now, released)."""
    if not _postgresql():
        Lease.objects.filter(run_id__in=run_ids).update(
            expires_at=Now() + timedelta(seconds=seconds)
        )
        return
    sql = (
        "UPDATE runs_lease SET expires_at = STATEMENT_TIMESTAMP() + make_interval(secs => $2) "
        "WHERE run_id = ANY($1::uuid[])"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [list(run_ids), seconds])


def leases_remaining(run_ids: list) -> list[tuple]:
    """(run id, owner, version, seconds left by the database's clock) of the runs' unexpired
    leases. One read, no lock."""
    if not _postgresql():
        left = ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
        rows = (
            Lease.objects.filter(run_id__in=run_ids, expires_at__gt=Now())
            .annotate(left=left)
            .values_list("run_id", "owner", "lease_version", "left")
        )
        return [(*row, remaining.total_seconds()) for *row, remaining in rows]
    sql = (
        "SELECT run_id, owner, lease_version, "
        "EXTRACT(EPOCH FROM expires_at - STATEMENT_TIMESTAMP())::float8 FROM runs_lease "
        "WHERE run_id = ANY($1::uuid[]) AND expires_at > STATEMENT_TIMESTAMP()"
    )
    return _rows(sql, [list(run_ids)])


def events_after(run_ids: list, seq: int) -> list[tuple]:
    """(run id, seq, action id, the action's plan id) of the runs' events after `seq`."""
    if not _postgresql():
        since = RunEvent.objects.filter(run_id__in=run_ids, seq__gt=seq)
        return list(since.values_list("run_id", "seq", "action_id", "action__plan_id"))
    sql = (
        "SELECT e.run_id, e.seq, e.action_id, a.plan_id FROM runs_runevent e "
        "LEFT JOIN runs_action a ON a.id = e.action_id "
        "WHERE e.run_id = ANY($1::uuid[]) AND e.seq > $2"
    )
    return _rows(sql, [list(run_ids), seq])


def _rows(sql: str, params: list) -> list[tuple]:
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


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
