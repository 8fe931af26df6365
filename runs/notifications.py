"""The notification job, at the path outbox rows store (runs.record.outbox.NOTIFY_JOB):
it stays here whatever moves. What it does is runs.notify."""

from __future__ import annotations

from runs.notify.delivery import deliver


def approval_notify(run_id: str | None = None, *, action: str, kind: str) -> int:
    """The RQ job: sends one notification about one action and confirms its outbox message;
    returns how many channels accepted it (runs.notify.delivery.deliver)."""
    return deliver(action=action, kind=kind)
