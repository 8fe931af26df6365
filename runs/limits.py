"""Size limits of what an agent hands us to keep: a run's goal, plan and versions, and an
observation's summary (README and SECURITY.md, "Agent API limits").

Defined once here; the API's schemas document them (runs.api.schemas) and every path that stores
agent-supplied text (the REST API, the MCP gateway's countersign_start_run and its calls)
refuses through `agent_data_check`, before anything is written. Each of these ends up in the
run's events, its checkpoints and on every approver's page, so a body that fits the
1,000,000-byte request limit could otherwise make each of those a megabyte.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import QuerySet

from control.foundation.canonical import canonical_json
from runs.exceptions import InvalidArguments, TooManyWaiting
from runs.models import Action, Plan

GOAL_MAX_CHARS = 2_000
SUMMARY_MAX_CHARS = 2_000
PLAN_MAX_BYTES = 65_536  # of its canonical JSON (UTF-8), as the checkpoint signs it
VERSIONS_MAX_KEYS = 32
VERSIONS_MAX_CHARS = 200  # each key, and each value (a value that is not a string: its JSON)
# What a refused proposal's Retry-After says: waiting requests leave as people decide.
WAITING_RETRY_SECONDS = 60


class TooLarge(InvalidArguments):
    """Agent data past its documented limit: `field` and `limit` say which and how much."""

    def __init__(self, field: str, limit: str, size: str) -> None:
        super().__init__(f"{field} is {size}; the limit is {limit} (Agent API limits)")
        self.field = field
        self.limit = limit
        self.rule = "too_large"


def agent_data_check(
    *,
    goal: str | None = None,
    summary: str | None = None,
    plan: dict[str, Any] | None = None,
    versions: dict[str, Any] | None = None,
) -> None:
    """Raises TooLarge for the first value past its limit, InvalidArguments for a plan or
    versions without a canonical JSON form (the checkpoint could not sign it)."""
    _text_check("goal", goal, GOAL_MAX_CHARS)
    _text_check("summary", summary, SUMMARY_MAX_CHARS)
    if plan is not None:
        size = len(_canonical("plan", plan))
        if size > PLAN_MAX_BYTES:
            raise TooLarge("plan", f"{PLAN_MAX_BYTES} bytes of canonical JSON", f"{size} bytes")
    if versions is not None:
        _canonical("versions", versions)
        _versions_check(versions)


def _text_check(field: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise TooLarge(field, f"{limit} characters", f"{len(value)} characters")


def _canonical(field: str, value: dict[str, Any]) -> bytes:
    try:
        return canonical_json(value)
    except ValueError as error:
        raise InvalidArguments(f"{field}: {error}") from None


def _versions_check(versions: dict[str, Any]) -> None:
    if len(versions) > VERSIONS_MAX_KEYS:
        raise TooLarge("versions", f"{VERSIONS_MAX_KEYS} keys", f"{len(versions)} keys")
    for key, value in versions.items():
        _text_check(f"versions key {key[:40]!r}", key, VERSIONS_MAX_CHARS)
        shown = value if isinstance(value, str) else canonical_json(value).decode()
        _text_check(f"versions[{key[:40]!r}]", shown, VERSIONS_MAX_CHARS)


def waiting_cap_check(*, tenant_id: UUID, proposed_by: str, plan: bool) -> None:
    """Refuses one more waiting request (or plan) of an agent that already has its cap
    (COUNTERSIGN_API_MAX_WAITING_REQUESTS / _PLANS) waiting for people: each is a card in
    every approver's inbox. Counted on partial indexes of waiting rows (action_waiting_proposer,
    plan_waiting_proposer), so the count reads nothing of the tenant's history. Two proposals
    racing at the cap may both pass: the cap bounds a flood, not an exact number."""
    if plan:
        cap = settings.COUNTERSIGN_API_MAX_WAITING_PLANS
        waiting: QuerySet = Plan.objects.filter(
            tenant_id=tenant_id, proposed_by=proposed_by, status=Plan.Status.WAITING_APPROVAL
        )
    else:
        cap = settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS
        waiting = Action.objects.filter(
            tenant_id=tenant_id,
            proposed_by=proposed_by,
            plan__isnull=True,
            status=Action.Status.WAITING_APPROVAL,
        )
    # Counting past the cap would read more than the answer needs; proposed_by is in the
    # index, so the scan need not visit the rows.
    if len(waiting[:cap].values_list("proposed_by", flat=True)) >= cap:
        what = "plans" if plan else "requests"
        raise TooManyWaiting(
            f"{proposed_by} already has {cap} {what} waiting for approval (the limit); "
            "propose more once people have decided some",
            retry_after=WAITING_RETRY_SECONDS,
        )
