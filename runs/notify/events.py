"""A notification's moment as a CloudEvents 1.0 event (structured mode, JSON): the
envelope the standard webhook format sends (runs.notify.webhook). docs/WEBHOOKS.md lists the
event types and what each one's `data` holds."""

from __future__ import annotations

from datetime import UTC, datetime

from runs.models.notify_kinds import KINDS

SPEC_VERSION = "1.0"
# One type per moment; a type is never renamed (receivers route on it).
EVENT_TYPES = {kind: f"com.countersign.intent.{kind}" for kind in KINDS}


def cloud_event(payload: dict, *, occurred_at: datetime) -> dict:
    """The event of a notification payload (runs.notify.mail.notification_payload), which is
    its `data` unchanged. `id` is the moment's (`<kind>:<action pk>`, once per action), the
    `source` is the run's page, the `subject` the intent, `tenant` an extension attribute."""
    return {
        "specversion": SPEC_VERSION,
        "id": payload["id"],
        "type": EVENT_TYPES[payload["kind"]],
        "source": payload["links"]["run"],
        "subject": payload["action"]["id"],
        "time": occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "tenant": payload["tenant"],
        "datacontenttype": "application/json",
        "data": payload,
    }
