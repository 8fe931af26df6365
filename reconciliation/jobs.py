"""RQ entry points of reconciliation: thin, ids only."""

from __future__ import annotations

from reconciliation.probes import probe_due_cases
from reconciliation.services import open_missing_cases


def open_cases(run_id: str | None = None) -> int:
    """Opens the cases of a run's uncertain actions and runs their first probes at once."""
    opened = open_missing_cases(run_id=run_id)
    probe_due_cases()
    return opened
