"""Tampering as a database owner would: with the insert-only triggers switched off."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection


@contextlib.contextmanager
def as_database_owner() -> Iterator[None]:
    """Row triggers do not fire inside (session_replication_role = replica, superuser only):
    what the application's own writes can never do, an owner of the database can."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET session_replication_role")
