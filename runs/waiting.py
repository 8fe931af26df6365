"""Long-polls on an action: wait, holding no database connection, until it leaves the
statuses that are still heading for a decision or an outcome (the API's `?wait=` and the
MCP gateway's countersign_wait). An uncertain action is still heading for one: its case is
being reconciled, and every resolution moves it on (applied, not applied, compensated,
abandoned), so a waiting agent holds instead of polling into its rate limit."""

from __future__ import annotations

import time

from control.api_kit.limits import sleep_without_database
from runs.models import Action
from runs.selectors import action_status

# An action in one of these is still heading for a decision or an outcome: a long-poll holds.
WAITED_ON_STATUSES = frozenset(
    {
        Action.Status.WAITING_APPROVAL,
        Action.Status.APPROVED,
        Action.Status.IN_FLIGHT,
        Action.Status.RETRY_WAIT,
        Action.Status.NEEDS_ATTENTION,
        Action.Status.UNCERTAIN,  # its case is being reconciled
    }
)
# A long-poll looks again after these, doubling up to the last: quick for a decision that
# lands at once, and few reconnections (it closes its connection while it sleeps).
FIRST_POLL_SECONDS = 0.25
LONGEST_POLL_SECONDS = 1.0


def status_after_waiting(action: Action, seconds: float) -> str:
    """The action's status once it is no longer waited on, or when `seconds` have passed."""
    deadline = time.monotonic() + seconds
    interval = FIRST_POLL_SECONDS
    status = action.status
    while status in WAITED_ON_STATUSES and (remaining := deadline - time.monotonic()) > 0:
        sleep_without_database(min(interval, remaining))
        interval = min(interval * 2, LONGEST_POLL_SECONDS)
        status = action_status(action.pk)
    return status
