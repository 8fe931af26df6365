"""SQLite for the tests' SQLite leg: Django's backend, with a flush that passes the
insert-only triggers the way PostgreSQL's does.

A transactional test ends by flushing every table. On PostgreSQL the flush is a TRUNCATE,
which fires no row trigger; on SQLite it is a DELETE per table, which the insert-only
triggers refuse (runs_receipt is insert-only: DELETE refused) and the metrics triggers count.
So here the flush drops the tables' triggers, deletes, and creates the same triggers again
from the text SQLite kept of them. Only tests use this backend; the product's SQLite has no
flush.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        deletes = super().sql_flush(
            style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
        if not deletes:
            return deletes
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            triggers = cursor.fetchall()
        drops = [f'DROP TRIGGER "{name}"' for name, _ in triggers]
        return [*drops, *deletes, *(sql for _, sql in triggers)]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
