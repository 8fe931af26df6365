"""RQ entry points: thin, take ids only, and re-check everything in the database."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from runs.execution.drain import drain
from runs.record.outbox import drain_ensure_queued

logger = logging.getLogger(__name__)


def execute_run(run_id: str | None = None) -> int:
    """Drains every due action, not only this run's: one job does the work of a whole burst
    of approvals (the relay coalesces their messages onto one waiting job), so RQ's per-job
    cost does not cap throughput. `run_id` is kept for jobs queued with it; a job that finds
    nothing returns."""
    return drain(on_full_claim=_queue_a_helper)


def _queue_a_helper() -> None:
    """More may be due than this drain claimed: a waiting job lets an idle worker join in.
    Without Redis there is no helper; the sweep queues a drain while anything is due."""
    try:
        drain_ensure_queued()
    except RedisError as error:
        logger.warning("no helper drain queued, Redis: %s", error)
