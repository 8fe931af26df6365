"""Checkpoint schema upgraders: each turns a verified state of version N into version N+1.

Every schema change adds one and keeps a signed fixture of the old version in
tests/fixtures/checkpoints/, which must still verify through the chain. An upgrader runs
after the MAC check and before the invariants; a state it cannot read is refused
(CheckpointError at "upgrade"), never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable

from runs.exceptions import CheckpointError
from runs.record.completed import completed_entry, completed_fold


def _v1_to_v2(state: dict) -> dict:
    """v1 embedded every completed action with its receipt (`completed_actions`, sorted by
    id) and their ids in completion order (`completed_work`); v2 keeps their count and the
    running digest over the same receipts in completion order."""

    def refuse(message: str):
        raise CheckpointError("upgrade", f"v1 -> v2: {message}")

    order, completed = state.get("completed_work"), state.get("completed_actions")
    if not isinstance(order, list) or not isinstance(completed, list):
        refuse("completed_work and completed_actions must be lists")
    by_id = {}
    for item in completed:
        receipt = item.get("receipt") if isinstance(item, dict) else None
        if not isinstance(receipt, dict) or receipt.get("intent_digest") != item.get(
            "intent_digest"
        ):
            refuse("a completed action lacks a receipt with its own digest")
        try:
            by_id[item["action_id"]] = completed_entry(
                action_id=item["action_id"],
                intent_digest=item["intent_digest"],
                status=item["status"],
                receipt_id=receipt["receipt_id"],
                idempotency_key=receipt["idempotency_key"],
                source=receipt["source"],
                target_version=receipt["target_version"],
            )
        except (KeyError, TypeError) as error:
            refuse(f"a completed action is missing {error}")
    if unordered := sorted(set(by_id) - set(order)):
        refuse(f"completed actions {unordered} are not in completed_work")
    # Ids without an entry were completed where an imported run came from: v1 kept no
    # receipt for them here, and neither does the digest.
    count, digest = completed_fold(by_id[action_id] for action_id in order if action_id in by_id)
    upgraded = {
        field: value
        for field, value in state.items()
        if field not in ("completed_work", "completed_actions")
    }
    upgraded["completed"] = {"count": count, "digest": digest}
    return upgraded


def _v2_to_v3(state: dict) -> dict:
    """v3 signs a plan's items as a chain beside its next item (`open_plan`), and large
    agent data as a digest (`detached`: a v2 state held it all inline). v2 signed only
    the next item: an upgraded state vouches for no other item of its plan, so a plan in
    progress when the server was upgraded stops at its next checkpoint for a person
    (recover_run), never trusting items nobody signed."""
    if "open_plan" in state:
        raise CheckpointError("upgrade", "v2 -> v3: the state already holds open_plan")
    return {**state, "open_plan": None, "detached": {}}


UPGRADERS: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2, 2: _v2_to_v3}
