"""Tampering as a database owner would: with the insert-only triggers switched off."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from django.db import connection, models


@contextlib.contextmanager
def as_database_owner() -> Iterator[None]:
    """Row triggers do not fire inside: what the application's own writes can never do, an
    owner of the database can. PostgreSQL: session_replication_role = replica (superuser
    only). SQLite has no such switch; its owner drops the triggers and creates them again."""
    if connection.vendor == "sqlite":
        with _sqlite_triggers_dropped():
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET session_replication_role")


@contextlib.contextmanager
def _sqlite_triggers_dropped() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        triggers = cursor.fetchall()
        for name, _ in triggers:
            cursor.execute(f'DROP TRIGGER "{name}"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for _, sql in triggers:
                cursor.execute(sql)


def sql_params(params: list) -> list:
    """Parameters for raw SQL as the database stores them (a UUID is 32 hex digits on
    SQLite, a uuid on PostgreSQL)."""
    uuid_field = models.UUIDField()
    return [
        uuid_field.get_db_prep_value(value, connection) if isinstance(value, uuid.UUID) else value
        for value in params
    ]
