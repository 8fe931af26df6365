"""What this process wrote through a service, remembered until its transaction commits.

A checkpoint carries the intents and grants it signs forward from the last verified
checkpoint (runs.record.carry): a row that was not signed before may be signed now only when
the service writing it says so here, in memory, in the same transaction. Someone who can
write to the database but not to this process's memory cannot add to these marks, so an
intent or a grant they insert is never signed, and the worker refuses to send it.

Marks are the rows' primary keys (UUIDs). They are forgotten when the transaction commits;
one whose transaction rolled back names a row that never existed and is dropped after
MARK_SECONDS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from django.db import transaction

MARK_SECONDS = 600.0

_marks = threading.local()


def _table() -> dict[str, float]:
    table = getattr(_marks, "table", None)
    if table is None:
        table = _marks.table = {}
    return table


def authored(keys: Iterable) -> None:
    """Marks intents (Action pks), their grants (Approval pks) or plans (Plan pks) this
    transaction wrote through a service: the next checkpoint may sign them."""
    table = _table()
    now = time.monotonic()
    for stale in [key for key, at in table.items() if now - at > MARK_SECONDS]:
        del table[stale]
    table.update((str(key), now) for key in keys)
    transaction.on_commit(_forget)


def is_authored(key) -> bool:
    at = _table().get(str(key))
    return at is not None and time.monotonic() - at <= MARK_SECONDS


def _forget() -> None:
    _table().clear()
