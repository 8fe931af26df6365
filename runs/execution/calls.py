"""A batch's calls: each fenced by its lease, one connector's at most `concurrency` at once.

The batch's attempts are begun (runs.execution.batch) before any call goes out; here each
call is made with the single protocol's `send` (the fence, the call with the intent's key,
and what an error means) under one heartbeat for every lease of the batch. Calls to a
connector whose `concurrency` is 1 go out one after another in the worker's thread; a
connector that allows N has up to N of its calls out at once, each in a thread of its own
with its own database connection, closed when the call is done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import connection

from control.foundation.counters import count_event
from runs.exceptions import LeaseLost
from runs.execution.batch import Step
from runs.execution.heartbeat import lease_kept
from runs.execution.worker import send
from runs.record.events import LeaseToken
from runs.services import lease_release, leases_left

logger = logging.getLogger(__name__)


def send_all(steps: list[Step], *, worker: str) -> tuple[list[Step], list[Exception]]:
    """Calls every begun step's tool; returns (the steps answered with a receipt, in
    order, what raised). A step whose outcome the error handling recorded, or whose lease
    was lost, is in neither: its lease is released or left to the new owner."""
    fence = Fence([step.lease for step in steps])
    one_by_one = [step for step in steps if step.tool.concurrency <= 1]
    at_once: dict[str, list[Step]] = {}
    for step in steps:
        if step.tool.concurrency > 1:
            at_once.setdefault(step.tool.connector, []).append(step)
    failures: list[Exception] = []
    with lease_kept(*(step.lease for step in steps)):
        pools = [
            _start(group, limit=group[0].tool.concurrency, worker=worker, fence=fence)
            for group in at_once.values()
        ]
        for step in one_by_one:
            failures += _call(step, worker, fence)
        for pool, futures in pools:
            for future in futures:
                failures += future.result()
            pool.shutdown()
    return [step for step in steps if step.receipt is not None], failures


def _start(group: list[Step], *, limit: int, worker: str, fence: Fence):
    pool = ThreadPoolExecutor(max_workers=min(limit, len(group)), thread_name_prefix="call")
    return pool, [pool.submit(_call_in_thread, step, worker, fence) for step in group]


def _call_in_thread(step: Step, worker: str, fence: Fence) -> list[Exception]:
    try:
        return _call(step, worker, fence)
    finally:
        connection.close()  # this thread's own connection, if the call needed one


def _call(step: Step, worker: str, fence: Fence) -> list[Exception]:
    def call() -> bool:
        step.receipt = send(
            step.action,
            step.attempt,
            step.tool,
            lease=step.lease,
            worker=worker,
            policy=step.policy,
            fence=fence.check,
        )
        # No receipt: the error handling recorded the outcome, and the lease goes back.
        return step.receipt is not None

    return guarded(step.lease, step.action.pk, worker, call)


class Fence:
    """The lease check before each call of a batch, from one read for many calls.

    A lease read as held with `s` seconds left by the database's clock cannot be taken over
    for those `s` seconds: no worker may claim it before it expires. So a call made within
    half that time of the read (measured on this process's monotonic clock, which runs on
    while the process is stopped) is fenced by it; past that, the batch's leases are read
    again. A worker paused or cut off for longer therefore reads again before its next call,
    and stops there if its lease moved on, as with a read before every call."""

    def __init__(self, leases: list[LeaseToken]) -> None:
        self.leases = leases
        self.held: set[str] = set()
        self.until = 0.0
        self.lock = threading.Lock()

    def check(self, lease: LeaseToken) -> None:
        with self.lock:
            if time.monotonic() >= self.until:
                read_at = time.monotonic()
                left = leases_left(self.leases)
                self.held = set(left)
                self.until = read_at + min(left.values(), default=0) / 2
            held = lease.run_id in self.held
        if not held:
            raise LeaseLost(f"lease v{lease.version} on run {lease.run_id} is no longer held")


def guarded(lease: LeaseToken, action_pk, worker: str, work: Callable[[], bool | None]) -> list:
    """Runs `work` for one action. Fenced out (LeaseLost): nothing more is written, the new
    owner settles it. Anything else raised is logged, the lease goes back, and it is
    returned. `work` returning False means the lease is still ours to release."""
    try:
        if work() is False:
            lease_release(lease=lease)
    except LeaseLost:
        fenced(lease, worker)
    except Exception as error:
        logger.exception("worker %s: action %s raised", worker, action_pk)
        lease_release(lease=lease)
        return [error]
    return []


def fenced(lease: LeaseToken, worker: str) -> None:
    logger.warning("worker %s lost the lease on run %s", worker, lease.run_id)
    count_event("fencing_rejections")
