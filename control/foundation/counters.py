"""Counters for events that leave no row behind (a fenced-out write, a job with nothing to
do), kept in Redis for /metrics. Part of the foundation: it imports no app, so workers count
without importing the metrics view."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from control.foundation.queues import execution_connection

logger = logging.getLogger(__name__)
REDIS_COUNTERS = "countersign:metrics"
WORKER_EVENTS = {
    "fencing_rejections": "Writes refused because the worker no longer held the run's lease.",
    "duplicate_jobs": "Jobs delivered for work already done or taken (found nothing to do).",
}


def count_event(name: str, amount: int = 1) -> None:
    """Adds to a worker event counter; never fails the caller (metrics are not the truth)."""
    if name not in WORKER_EVENTS:
        raise ValueError(f"unknown worker event {name!r}")
    try:
        execution_connection().hincrby(REDIS_COUNTERS, name, amount)
    except RedisError as error:
        logger.info("metric %s not counted: %s", name, error)


def worker_event_counts() -> tuple[dict[str, int], bool]:
    """Every worker event's count, and whether Redis answered (a scrape reports both)."""
    try:
        raw = execution_connection().hgetall(REDIS_COUNTERS)
    except RedisError as error:
        logger.warning("metrics: Redis unreachable: %s", error)
        return {}, False
    return {key.decode(): int(value) for key, value in raw.items()}, True
