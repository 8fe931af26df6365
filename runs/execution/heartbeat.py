"""A live worker keeps its run's lease for as long as an external call takes.

The attempt's transaction renews the lease for one full term; a call may take longer (an MCP
server starting, a slow mail server). While the call runs, a thread renews the lease every
third of a term, so the receipt's transaction still holds it and no sweep or other worker
takes a healthy call for a dead one. A worker that stops (killed, paused, partitioned from
the database) stops renewing: the lease expires and recovery goes on exactly as before. A
renewal refused because the lease moved on (fenced) ends the heartbeat; the receipt's own
fenced transaction then refuses, and the action is settled by key as after any crash.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connection

from runs.exceptions import LeaseLost
from runs.record.events import LeaseToken
from runs.services import lease_renew

logger = logging.getLogger(__name__)


@contextmanager
def lease_kept(*leases: LeaseToken) -> Iterator[None]:
    """Renews every one of `leases` every third of a term until the block ends (a batch's
    calls go out one after another under one heartbeat)."""
    stop = threading.Event()
    interval = settings.COUNTERSIGN_LEASE_SECONDS / 3
    kept = list(leases)

    def beat() -> None:
        try:
            while kept and not stop.wait(interval):
                for lease in list(kept):
                    try:
                        lease_renew(lease=lease)
                    except LeaseLost:
                        kept.remove(lease)
                    except DatabaseError as error:
                        # The next beat tries again; past the term, the lease is lost as it
                        # should be.
                        logger.warning("renewing lease v%s failed: %s", lease.version, error)
        finally:
            connection.close()  # this thread's own connection

    heart = threading.Thread(target=beat, name=f"lease-{leases[0].run_id}", daemon=True)
    heart.start()
    try:
        yield
    finally:
        stop.set()
        heart.join()
