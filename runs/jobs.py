"""RQ entry points: thin, take ids only, and re-check everything in the database."""

from __future__ import annotations

from runs.execution.worker import drain


def execute_run(run_id: str | None = None) -> int:
    """Drains every due action, not only this run's: one job may do the work of many, so
    RQ's per-job cost does not cap throughput. A duplicate job finds nothing and returns."""
    return drain()
