"""What a notification says: its payload (also the webhook's body), and each mail's subject
and text, Countersign's own lines first and the agent's text quoted below them."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from control.web.pages import compact_json
from runs.decision_links import decision_link_url
from runs.models import Action
from runs.models.notify_kinds import ESCALATED, EXPIRED, EXPIRING, REQUESTED
from runs.notify.recipients import approvers_with_email, escalation_contacts
from runs.pages.lookalikes import lookalikes, quoted, shown

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


def mails(action: Action, payload: dict) -> list[tuple[str, str, str, list[str]]]:
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
