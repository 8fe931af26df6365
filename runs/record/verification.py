"""Proof that a run's stored state is what its events and checkpoint say it is."""

from __future__ import annotations

from runs.exceptions import CheckpointError
from runs.models import Approval, Run, StandingGrant, ToolPolicy
from runs.record.binding import intent_differences
from runs.record.carry import PLAN_ENTRY_FIELDS, plan_chain, plan_entry
from runs.record.checkpoints import latest_verified
from runs.record.completed import completed_verify
from runs.record.events import replay, run_state, verify_chain
from runs.record.signed_rows import POLICY_ROWS, RULE_ROWS


def events_verify(run: Run) -> list[str]:
    """Problems with the run's events alone; empty when the chain is intact and replaying
    the events gives the stored state (what `recover_run` re-signs from)."""
    problems = verify_chain(run)
    events = list(run.events.order_by("seq"))
    replayed = replay(events)
    for field, value in run_state(run).items():
        if replayed.get(field) != value:
            problems.append(f"replay gives {field}={replayed.get(field)!r}, stored {value!r}")
    if len(events) != run.state_version:
        problems.append(f"{len(events)} events but state version {run.state_version}")
    return [*problems, *completed_verify(run)]


def run_verify(run: Run) -> list[str]:
    """Problems found; empty when the events verify, the latest checkpoint verifies
    against the run and its pending rows, and every policy and rule its intents were
    decided under verifies."""
    problems = [*events_verify(run), *decided_under_unverified(run)]
    try:
        _, state = latest_verified(run)
    except CheckpointError as error:
        return [*problems, f"latest checkpoint: {error}"]
    if state["event_head_hash"] != run.event_head_hash:
        # The chain's head is signed in every checkpoint: events rewritten with their plain
        # hashes recomputed end at another head than the one signed.
        problems.append(
            f"the signed checkpoint names event head {state['event_head_hash']}, "
            f"the run {run.event_head_hash}: events were rewritten"
        )
    stored = {"count": run.completed_count, "digest": run.completed_digest}
    if state["completed"] != stored:
        problems.append(
            f"the signed checkpoint names completed work {state['completed']}, the run {stored}"
        )
    return [*problems, *_pending_rows_differ(run, state)]


def _pending_rows_differ(run: Run, state: dict) -> list[str]:
    """The open intent's row and grants must be what the checkpoint signed."""
    signed = state.get("pending_action")
    if signed is None:
        return []
    action = run.actions.select_related("observation").filter(pk=signed["id"]).first()
    if action is None:
        return [f"the signed pending intent {signed['action_id']} has no row"]
    problems = [f"pending intent: {line}" for line in intent_differences(state, action)]
    return [*problems, *_plan_rows_differ(run, state["open_plan"])]


def _plan_rows_differ(run: Run, open_plan: dict | None) -> list[str]:
    """Every item of the plan from its next one on must be what the signed chain commits
    to: an item edited while it waits its turn is found now, not only when it is sent."""
    if open_plan is None:
        return []
    rows = (
        run.actions.filter(plan_id=open_plan["id"], position__gte=open_plan["from_position"])
        .order_by("position")
        .values(*PLAN_ENTRY_FIELDS)
    )
    if plan_chain([plan_entry(row) for row in rows])[0] != open_plan["items_hash"]:
        return [
            f"the plan's items from position {open_plan['from_position']} differ from the "
            f"{open_plan['items']} the checkpoint signed"
        ]
    return []


def decided_under_unverified(run: Run) -> list[str]:
    """The run's intents decided under a tool policy or standing rule whose row did not
    verify when they were proposed (recorded in their event), or does not verify now."""
    problems = []
    proposals = run.events.filter(type__in=["action.proposed", "plan.proposed"]).order_by("seq")
    for event in proposals:
        payload = event.payload
        if payload.get("unverified_policy"):
            problems.append(
                f"event #{event.seq}: {payload.get('action_id')} was proposed while the "
                f"{payload.get('tool')} policy did not verify ({payload['unverified_policy']}); "
                "it was held for approval under the strictest policy"
            )
        for tool, problem in sorted((payload.get("unverified_policies") or {}).items()):
            problems.append(
                f"event #{event.seq}: plan {payload.get('plan')} was proposed while the "
                f"{tool} policy did not verify ({problem})"
            )
    tools = set(run.actions.values_list("tool", flat=True))
    for policy in ToolPolicy.objects.filter(tenant_id=run.tenant_id, tool__in=tools):
        problem = POLICY_ROWS.problem(policy)
        if problem:
            problems.append(f"the {policy.tool} policy this run's intents follow: {problem}")
    rule_ids = Approval.objects.filter(action__run=run, rule__isnull=False).values("rule_id")
    rules = StandingGrant.objects.filter(pk__in=rule_ids).prefetch_related("approvals")
    for rule in rules.order_by("created_at", "pk"):
        problem = RULE_ROWS.problem(rule)
        if problem:
            problems.append(
                f"standing rule {rule.name!r} ({rule.pk}), which approved intents of this run, "
                f"does not verify: {problem}"
            )
    return problems
