"""Proof that a run's stored state is what its events and checkpoint say it is."""

from __future__ import annotations

from runs.exceptions import CheckpointError
from runs.models import Run
from runs.record.binding import intent_differences
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from runs.record.events import replay, run_state, verify_chain


def run_verify(run: Run) -> list[str]:
    """Problems found; empty when the event chain is intact, replaying the events gives the
    stored state, and the latest checkpoint verifies against the run."""
    problems = verify_chain(run)
    events = list(run.events.order_by("seq"))
    replayed = replay(events)
    stored = run_state(run)
    for field, value in stored.items():
        if replayed.get(field) != value:
            problems.append(f"replay gives {field}={replayed.get(field)!r}, stored {value!r}")
    if len(events) != run.state_version:
        problems.append(f"{len(events)} events but state version {run.state_version}")
    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        problems.append("the run has no checkpoint")
    else:
        try:
            state = checkpoint_verify(checkpoint.body, run=run)
        except CheckpointError as error:
            problems.append(f"latest checkpoint: {error}")
        else:
            if state["event_head_hash"] != run.event_head_hash:
                # The chain's head is signed in every checkpoint: events rewritten with their
                # plain hashes recomputed end at another head than the one signed.
                problems.append(
                    f"the signed checkpoint names event head {state['event_head_hash']}, "
                    f"the run {run.event_head_hash}: events were rewritten"
                )
            problems.extend(_pending_rows_differ(run, state))
    return problems


def _pending_rows_differ(run: Run, state: dict) -> list[str]:
    """The open intent's row and grants must be what the checkpoint signed."""
    signed = state.get("pending_action")
    if signed is None:
        return []
    action = run.actions.select_related("observation").filter(pk=signed["id"]).first()
    if action is None:
        return [f"the signed pending intent {signed['action_id']} has no row"]
    return [f"pending intent: {line}" for line in intent_differences(state, action)]
