"""Time as the database sees it: leases and expiries never trust a worker's clock."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.utils import timezone


def db_now() -> datetime:
    if connection.vendor != "postgresql":
        # SQLite (demo only) has no server clock distinct from ours.
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]
