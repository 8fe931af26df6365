"""Tell people that a write waits for them: by email, and by an optional signed JSON webhook.

Rooms: `delivery` (the job's work, confirmation and retries), `recipients` (who is told),
`mail` (the subject and text of a mail), `webhook` (sending it), `signing` (its signatures
and secret), `events` (its CloudEvents envelope and event types). The kinds
of moment are runs.models.notify_kinds; the job sits at its stored path, runs.notifications.

Four moments: an approval was requested, it waited past its tool policy's SLA (escalated),
it is about to expire, it expired. The services
write an OutboxMessage with `job=NOTIFY_JOB` and `payload={"action": <pk>, "kind": <kind>}`
in the transaction that makes the moment true; the relay hands it to RQ, and
`runs.notifications.approval_notify` (a thin job taking ids) re-reads the action and sends.
A moment that is no longer true when the job runs (a request already decided) sends nothing.

Delivery is at least once, and "delivered" means a channel accepted it (the mail server, the
webhook's 2xx), not that a job was queued: the job confirms its outbox message. A failed send
is recorded and handed to RQ again after a backoff (30 s doubling, at most an hour, up to
NOTIFY_ATTEMPTS tries); a message handed over but never confirmed (Redis lost the job) is
handed over again by the sweep after LOST_AFTER. A retry may send twice: receivers of the
webhook dedupe by the `id` field (`<kind>:<action pk>`: each moment happens once per action).

Who is mailed: everyone who may decide, each in a mail of their own; the "approval requested"
mail carries that person's decision link (runs.decision_links). An escalation goes to the
tool policy's escalation contacts instead, with a link to the inbox only: a contact need not
be a member.

What an agent wrote (target, goal, observation summary) is quoted in the mail, one line each
with newlines and hidden characters escaped and a length cap, below Countersign's own lines
and decision link: an agent cannot draw a block that passes for ours (notification_text).

Settings (all optional; read at each call):
- COUNTERSIGN_BASE_URL: where links in messages point (default http://localhost:8000).
- COUNTERSIGN_NOTIFY_FROM: the sender address (default DEFAULT_FROM_EMAIL).
- COUNTERSIGN_NOTIFY_WEBHOOK_URL and COUNTERSIGN_NOTIFY_WEBHOOK_SECRET: each notification is
  also POSTed there, signed; COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT says how: `standard` (Standard
  Webhooks over a CloudEvents 1.0 event, a whsec_ secret) or the deprecated `countersign-v1`
  (docs/WEBHOOKS.md).
"""
