"""RQ entry points of reconciliation: thin, ids only."""

from __future__ import annotations

from reconciliation.services import open_missing_cases


def open_cases(run_id: str | None = None) -> int:
    return open_missing_cases(run_id=run_id)
