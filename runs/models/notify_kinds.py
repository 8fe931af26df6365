"""The moments a notification tells of: the `kind` of an OutboxMessage for NOTIFY_JOB
(runs.record.outbox), written by the services in the transaction that makes the moment
true, and read by runs.notify when it sends."""

from __future__ import annotations

REQUESTED = "requested"
EXPIRING = "expiring"
EXPIRED = "expired"
ESCALATED = "escalated"
KINDS = (REQUESTED, EXPIRING, EXPIRED, ESCALATED)
