"""Reads of the MCP gateway: an agent's writes across its sessions, and its idle runs."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, QuerySet

from runs.models import OPEN_ACTION_STATUSES, Action, McpAgent, McpSession, Run

# A repeat of one of these is the same intent: still heading for an outcome, executed (its
# receipt), or replaced by an operator's edit (its envelope names the edited intent). A
# rejected, expired, failed or cancelled write may be asked for again, as a new intent.
REPEATABLE_STATUSES = frozenset(
    {*OPEN_ACTION_STATUSES, Action.Status.SUCCEEDED, Action.Status.SATISFIED}
    | {Action.Status.SUPERSEDED}
)


def agent_write(agent: McpAgent, *, action_id: str, digest: str) -> Action | None:
    """The agent's latest write under this logical id and digest, in any of its runs
    (so any of its sessions), while a repeat of it is still the same intent."""
    return (
        Action.objects.filter(
            run__mcp_agent_run__agent=agent,
            action_id=action_id,
            intent_digest=digest,
            status__in=REPEATABLE_STATUSES,
        )
        .order_by("-created_at")
        .first()
    )


def idle_mcp_runs(*, idle_since: datetime) -> QuerySet[Run]:
    """Runs the gateway started that are `running`, hold no open write, changed nothing
    since `idle_since`, and whose sessions made no call since then either."""
    open_write = Action.objects.filter(run=OuterRef("pk"), status__in=OPEN_ACTION_STATUSES)
    seen = McpSession.objects.filter(run=OuterRef("pk"), last_seen_at__gte=idle_since)
    return Run.objects.filter(
        mcp_agent_run__isnull=False, phase=Run.Phase.RUNNING, updated_at__lt=idle_since
    ).filter(~Exists(open_write), ~Exists(seen))
