"""Counting the transactions one process commits, and which of them wrote.

Read-only transactions cost PostgreSQL no WAL flush; write transactions each wait for one
(synchronous_commit), so they set the ceiling. Counted from the SQL Django sends:
- outside an atomic block every statement is its own transaction;
- inside one, the outermost block's commit ends one transaction (rolled back ones are not
  counted).
A transaction "writes" when it sends INSERT, UPDATE, DELETE or a row lock (FOR UPDATE).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

_WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b|\bFOR (NO KEY )?UPDATE\b", re.IGNORECASE)


@dataclass
class TransactionCount:
    transactions: int = 0
    writes: int = 0
    statements: int = 0


@dataclass
class _Open:
    writes: bool = False


class _Counter:
    def __init__(self) -> None:
        self.count = TransactionCount()
        self._open: _Open | None = None
        self._callback = None

    def _pending(self, conn) -> bool:
        return any(entry[1] is self._callback for entry in conn.run_on_commit)

    def __call__(self, execute, sql, params, many, context):
        conn = context["connection"]
        writes = bool(_WRITES.search(sql))
        self.count.statements += 1
        if not conn.in_atomic_block:
            self.count.transactions += 1
            self.count.writes += writes
        else:
            if self._open is None or not self._pending(conn):
                state = _Open()
                self._open = state

                def done(state=state):
                    self.count.transactions += 1
                    self.count.writes += state.writes

                self._callback = done
                conn.on_commit(done)
            self._open.writes = self._open.writes or writes
        return execute(sql, params, many, context)


@contextmanager
def counting_transactions():
    """Yields a TransactionCount filled in as this thread's default connection commits."""
    counter = _Counter()
    with connection.execute_wrapper(counter):
        yield counter.count
