"""Tell people that a write waits for them: by email, and by an optional signed JSON webhook.

Four moments: an approval was requested, it waited past its tool policy's SLA (escalated),
it is about to expire, it expired. The services
write an OutboxMessage with `job=NOTIFY_JOB` and `payload={"action": <pk>, "kind": <kind>}`
in the transaction that makes the moment true; the relay hands it to RQ, and
`approval_notify` (a thin job taking ids) re-reads the action and sends. A moment that is no
longer true when the job runs (a request already decided) sends nothing.

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
- COUNTERSIGN_NOTIFY_WEBHOOK_URL and COUNTERSIGN_NOTIFY_WEBHOOK_SECRET: when both are set,
  each notification is also POSTed there as JSON, signed with HMAC-SHA256.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from datetime import timedelta

import requests
from django.conf import settings
from django.core.mail import send_mass_mail
from django.db.models.functions import Now
from django.urls import reverse

from control.foundation.canonical import canonical_json
from control.foundation.tenancy import APPROVER_ROLES, verified_memberships
from control.models import Membership
from control.web.pages import compact_json
from runs.decision_links import decision_link_url
from runs.models import Action, OutboxMessage, ToolPolicy
from runs.pages.lookalikes import lookalikes, quoted, shown
from runs.record.outbox import NOTIFY_JOB
from runs.record.signed_rows import POLICY_ROWS

logger = logging.getLogger(__name__)

REQUESTED = "requested"
EXPIRING = "expiring"
EXPIRED = "expired"
ESCALATED = "escalated"
KINDS = (REQUESTED, EXPIRING, EXPIRED, ESCALATED)
SIGNATURE_HEADER = "X-Countersign-Signature"
TIMESTAMP_HEADER = "X-Countersign-Timestamp"
WEBHOOK_TIMEOUT = (3.05, 10.0)

# The status an action must still have for the moment to be worth telling.
STILL_TRUE = {
    REQUESTED: Action.Status.WAITING_APPROVAL,
    EXPIRING: Action.Status.WAITING_APPROVAL,
    EXPIRED: Action.Status.EXPIRED,
    ESCALATED: Action.Status.WAITING_APPROVAL,
}
SUBJECTS = {
    REQUESTED: "Approval requested: {tool} {target}",
    EXPIRING: "Approval expires soon: {tool} {target}",
    EXPIRED: "Approval expired, never approved: {tool} {target}",
    ESCALATED: "Escalated, still waiting for approval: {tool} {target}",
}


# Agent text in a mail: each on one line, quoted, at most this many of its characters.
AGENT_TEXT_LIMIT = 300
SUBJECT_TARGET_LIMIT = 80
AGENT_TEXT_HEADING = (
    "Written by the agent, quoted as it is stored, one line each (not from Countersign):"
)

NOTIFY_ATTEMPTS = 8
RETRY_FIRST_SECONDS = 30.0
RETRY_CAP_SECONDS = 3600.0
LOST_AFTER = timedelta(minutes=5)


class WebhookError(Exception):
    """The webhook did not answer 2xx: not delivered, tried again later."""


def approval_notify(run_id: str | None = None, *, action: str, kind: str) -> int:
    """The RQ job: sends one notification about one action and confirms its outbox message;
    returns how many channels accepted it. A channel that fails is recorded for a retry."""
    if kind not in KINDS:
        raise ValueError(f"unknown notification kind {kind!r}")
    messages = OutboxMessage.objects.filter(job=NOTIFY_JOB, action_id=action, payload__kind=kind)
    try:
        sent = _send(action=action, kind=kind)
    except (WebhookError, requests.RequestException, OSError) as error:
        reason = delivery_failure(error)
        logger.warning("notification %s:%s not delivered: %s", kind, action, reason)
        _retry_later(messages, reason)
        return 0
    messages.update(confirmed_at=Now(), last_error="")
    return sent


def _send(*, action: str, kind: str) -> int:
    row = (
        Action.objects.select_related("run", "tenant", "observation", "plan")
        .filter(pk=action, status=STILL_TRUE[kind])
        .first()
    )
    if row is None:
        return 0  # the moment passed (a request already decided): nothing to tell
    payload = notification_payload(row, kind=kind)
    sent = 0
    mails = _mails(row, payload)
    if mails:
        send_mass_mail(mails)
        sent += 1
    url = getattr(settings, "COUNTERSIGN_NOTIFY_WEBHOOK_URL", "")
    secret = getattr(settings, "COUNTERSIGN_NOTIFY_WEBHOOK_SECRET", "")
    if url and secret:
        webhook_send(url=url, secret=secret, payload=payload)
        sent += 1
    return sent


def delivery_failure(error: Exception) -> str:
    """Why a send failed, as recorded and logged: never the webhook's URL (requests repeats
    it, path and query included, and a webhook URL often carries a token) nor the secret."""
    if isinstance(error, requests.RequestException):
        return f"{type(error).__name__}: the webhook could not be reached"
    detail = str(error) if isinstance(error, WebhookError) else getattr(error, "strerror", "")
    return f"{type(error).__name__}: {detail or 'the email could not be sent'}"[:2000]


def _retry_later(messages, reason: str) -> None:
    """Hands the message to RQ again after a backoff; after NOTIFY_ATTEMPTS, gives up loudly."""
    for message in messages:
        if message.delivery_attempts >= NOTIFY_ATTEMPTS:
            logger.error("notification %s given up after %s tries", message.pk, NOTIFY_ATTEMPTS)
            messages.filter(pk=message.pk).update(last_error=f"gave up: {reason}")
            continue
        pause = min(RETRY_FIRST_SECONDS * 2 ** (message.delivery_attempts - 1), RETRY_CAP_SECONDS)
        messages.filter(pk=message.pk).update(
            delivered_at=None,
            relay_after=Now() + timedelta(seconds=pause),
            last_error=reason,
        )


def requeue_lost() -> int:
    """Notifications handed to RQ long ago and never confirmed nor failed: their job was lost
    (Redis lost its data, a worker died mid-send). They are handed over again."""
    return (
        OutboxMessage.objects.filter(
            job=NOTIFY_JOB,
            confirmed_at__isnull=True,
            delivered_at__lte=Now() - LOST_AFTER,
        )
        .exclude(last_error__startswith="gave up")
        .update(delivered_at=None, relay_after=None)
    )


def _mails(action: Action, payload: dict) -> list[tuple[str, str, str, list[str]]]:
    """One (subject, body, sender, recipients) per mail: a mail of their own for each person
    who may decide (a requested one carries their decision link), or one to the contacts."""
    plan = payload["plan"]
    if plan:
        subject = SUBJECTS[payload["kind"]].format(
            tool=f"plan of {plan['size']}:", target=", ".join(plan["tools"])
        )
    else:
        # A header is one line: a newline in it would refuse the whole mail, every retry.
        target = shown(action.target[:SUBJECT_TARGET_LIMIT])
        target += "…" if len(action.target) > SUBJECT_TARGET_LIMIT else ""
        subject = SUBJECTS[payload["kind"]].format(tool=action.tool, target=target)
    sender = getattr(settings, "COUNTERSIGN_NOTIFY_FROM", "") or settings.DEFAULT_FROM_EMAIL
    if payload["kind"] == ESCALATED:
        contacts = escalation_contacts(action)
        return [(subject, notification_text(payload), sender, contacts)] if contacts else []
    mails = []
    for approver_pk, address in approvers_with_email(action.tenant):
        link = ""
        if payload["kind"] == REQUESTED:
            link = decision_link_url(action=action, approver_pk=approver_pk)
        body = notification_text(payload, decision_link=link)
        mails.append((subject, body, sender, [address]))
    return mails


def approvers_with_email(tenant) -> list[tuple[int, str]]:
    """Everyone who may decide in the tenant and has an address, once each, by address."""
    memberships = (
        Membership.objects.filter(tenant=tenant, role__in=APPROVER_ROLES, user__is_active=True)
        .exclude(user__email="")
        .select_related("user")
    )
    # A membership that does not verify makes nobody an approver, nor a recipient.
    verified, _ = verified_memberships(memberships)
    rows = {(row.user_id, row.user.email) for row in verified}
    return sorted(rows, key=lambda row: (row[1], row[0]))


def escalation_contacts(action: Action) -> list[str]:
    """The addresses the action's tool policy escalates to, as the policy says now; none
    when the row does not verify (a forged row must not mail requests to its own contacts)."""
    policy = ToolPolicy.objects.filter(tenant_id=action.tenant_id, tool=action.tool).first()
    if policy is None or not POLICY_ROWS.verifies(policy):
        return []
    return list(policy.escalation_contacts)


def notification_payload(action: Action, *, kind: str) -> dict:
    base = getattr(settings, "COUNTERSIGN_BASE_URL", "http://localhost:8000").rstrip("/")
    observation = action.observation
    return {
        "id": f"{kind}:{action.pk}",
        "kind": kind,
        "tenant": action.tenant.name,
        "run": {"id": str(action.run_id), "goal": action.run.goal},
        "action": {
            "id": str(action.pk),
            "action_id": action.action_id,
            "tool": action.tool,
            "target": action.target,
            "args": action.args,
            "intent_digest": action.intent_digest,
            "state_version": action.base_version,
            "proposed_by": action.proposed_by,
            "status": action.status,
            "expires_at": action.expires_at.isoformat() if action.expires_at else None,
        },
        "plan": _plan_payload(action),
        "observation": {
            "source": observation.source,
            "summary": observation.summary,
            "content_hash": observation.content_hash,
        }
        if observation
        else None,
        "links": {
            "inbox": f"{base}{reverse('inbox')}?run={action.run_id}",
            "run": f"{base}{reverse('run_detail', args=[action.run_id])}",
        },
    }


def _plan_payload(action: Action) -> dict | None:
    """The plan an intent was proposed in: the moment is the plan's, decided as one."""
    if action.plan_id is None:
        return None
    plan = action.plan
    tools = Action.objects.filter(plan=plan).values_list("tool", flat=True).distinct()
    return {
        "id": str(plan.pk),
        "digest": plan.digest,
        "size": plan.size,
        "tools": sorted(tools),
        "state_version": plan.base_version,
        "expires_at": plan.expires_at.isoformat(),
    }


def notification_text(payload: dict, *, decision_link: str = "") -> str:
    """The mail's text. Countersign's own lines come first, the decision link among them;
    what the agent wrote (target, goal, observation) is quoted on one line each, so no goal
    or summary can draw a block that looks like ours ("Approve here: ...")."""
    action = payload["action"]
    plan = payload["plan"]
    target = quoted(action["target"], limit=AGENT_TEXT_LIMIT)
    lines = [
        {
            REQUESTED: "An agent asks to make this write and waits for your decision.",
            ESCALATED: "This request has waited past its tool's escalation time. "
            "Unanswered, it will expire and never run.",
            EXPIRING: "This request expires soon. Unanswered, it will never run.",
            EXPIRED: "This request expired without approval. It will not run; you may ask again.",
        }[payload["kind"]],
        "",
    ]
    if plan:
        lines += [
            f"Plan:     {plan['size']} writes, approved or rejected as one",
            f"Tools:    {', '.join(plan['tools'])}",
            f"First:    {action['tool']} {target}",
            f"Proposer: {quoted(action['proposed_by'], limit=AGENT_TEXT_LIMIT)}",
            f"Digest:   {plan['digest']} (plan, state version {plan['state_version']})",
            f"Expires:  {plan['expires_at']}",
        ]
    else:
        lines += [
            f"Tool:     {action['tool']}",
            f"Target:   {target}",
            f"Proposer: {quoted(action['proposed_by'], limit=AGENT_TEXT_LIMIT)}",
            f"Digest:   {action['intent_digest']} (state version {action['state_version']})",
            f"Expires:  {action['expires_at']}",
        ]
    lines += _lookalike_lines(action["target"], place="target")
    lines += _lookalike_lines(compact_json(action["args"]), place="arguments")
    if decision_link:
        lines += [
            "",
            "Review and decide (a link for you alone, it works once and expires soon):",
            decision_link,
        ]
    lines += ["", f"Decide in the inbox: {payload['links']['inbox']}", "", AGENT_TEXT_HEADING]
    lines.append(f"> Run goal: {quoted(payload['run']['goal'], limit=AGENT_TEXT_LIMIT)}")
    if payload["observation"]:
        summary = quoted(payload["observation"]["summary"], limit=AGENT_TEXT_LIMIT)
        lines.append(f"> Because:  {summary}")
    return "\n".join(lines) + "\n"


def _lookalike_lines(text: str, *, place: str) -> list[str]:
    """The inbox's look-alike warnings, as mail lines (a flag's text is already escaped)."""
    return [
        f'Warning:  look-alike characters in the {place}: "{flag.text}" '
        f"{flag.why}{f', really {flag.punycode}' if flag.punycode else ''} "
        f"({', '.join(flag.code_points)})"
        for flag in lookalikes(text)
    ]


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over `timestamp.body`: the timestamp is signed so a replay can be refused."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhook_verify(
    *, secret: str, timestamp: str, body: bytes, signature: str, tolerance: int = 300
) -> bool:
    """What a receiver does (and what our tests do): constant-time compare, bounded age."""
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        return False
    expected = webhook_signature(secret=secret, timestamp=timestamp, body=body)
    return age <= tolerance and hmac.compare_digest(expected, signature)


def webhook_send(*, url: str, secret: str, payload: dict) -> None:
    body = canonical_json(payload)
    timestamp = str(int(time.time()))
    response = requests.post(
        url,
        data=body,
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Countersign-Notifier/1",
            "X-Countersign-Delivery": str(uuid.uuid4()),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: webhook_signature(secret=secret, timestamp=timestamp, body=body),
        },
        timeout=WEBHOOK_TIMEOUT,
        allow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise WebhookError(f"webhook answered {response.status_code}")
