"""Look-alike requests by digest: another open or recently executed intent of the tenant with
the same digest (the same tool, target and arguments), for the inbox's notice."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from control.models import Tenant
from runs.models import OPEN_ACTION_STATUSES, Action

# An executed write counts as a duplicate this long after it was executed: long enough for
# an agent that reconnected or retried, short enough not to flag a weekly routine.
RECENTLY_EXECUTED = timedelta(hours=24)
EXECUTED_STATUSES = frozenset({Action.Status.SUCCEEDED, Action.Status.SATISFIED})


@dataclass(frozen=True)
class Duplicate:
    """The intent a request is identical to (the most telling one), and how many more."""

    action_id: str
    logical_id: str
    status: str
    executed: bool
    at: datetime
    proposed_by: str
    run_id: str
    run_goal: str
    others: int

    @property
    def status_text(self) -> str:
        return self.status.replace("_", " ")


def duplicate_intents(actions: Iterable[Action], *, tenant: Tenant) -> dict[str, Duplicate]:
    """For each of `actions`, by its pk: another open or recently executed intent of the
    tenant with the same digest, an executed one first, the latest first. One query,
    whatever the number of actions."""
    actions = list(actions)
    digests = {action.intent_digest for action in actions}
    if not digests:
        return {}
    since = timezone.now() - RECENTLY_EXECUTED
    rows = (
        Action.objects.filter(tenant=tenant, intent_digest__in=digests)
        .filter(
            Q(status__in=OPEN_ACTION_STATUSES)
            | Q(status__in=EXECUTED_STATUSES, updated_at__gte=since)
        )
        .order_by("-updated_at")
        .values(
            "pk",
            "action_id",
            "intent_digest",
            "status",
            "updated_at",
            "proposed_by",
            "run_id",
            "run__goal",
        )
    )
    by_digest: dict[str, list[dict]] = {}
    for row in rows:
        by_digest.setdefault(row["intent_digest"], []).append(row)
    found = {}
    for action in actions:
        twins = [row for row in by_digest.get(action.intent_digest, []) if row["pk"] != action.pk]
        if twins:
            twins.sort(key=lambda row: row["status"] not in EXECUTED_STATUSES)  # stable
            found[str(action.pk)] = _duplicate(twins[0], others=len(twins) - 1)
    return found


def _duplicate(row: dict, *, others: int) -> Duplicate:
    return Duplicate(
        action_id=str(row["pk"]),
        logical_id=row["action_id"],
        status=row["status"],
        executed=row["status"] in EXECUTED_STATUSES,
        at=row["updated_at"],
        proposed_by=row["proposed_by"],
        run_id=str(row["run_id"]),
        run_goal=row["run__goal"],
        others=others,
    )
