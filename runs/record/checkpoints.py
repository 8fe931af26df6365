"""Signed checkpoints: build, sign, and verify in the seed's order.

Verification: strict parse -> envelope -> schema version -> MAC -> upgrade -> business
invariants -> freshness against the stored run -> lease. Each step fails with its own
CheckpointError(step, message); nothing is advanced before all of them pass.
"""

from __future__ import annotations

from control.foundation import signing
from control.foundation.canonical import canonical_json, content_hash
from control.foundation.strictjson import StrictJSONError, parse_strict
from runs.exceptions import CheckpointError, LeaseLost
from runs.models import Action, Checkpoint, Run
from runs.record.direct_sql import rows_insert
from runs.record.events import LeaseToken, check_lease, run_state, to_json_value
from runs.record.invariants import check_invariants
from runs.record.upgraders import UPGRADERS

SCHEMA_VERSION = 3
# Agent data (the run's plan, its versions) past this size is signed as a digest, not copied.
DETACH_BYTES = 4096
# How a run stopped by a refused checkpoint says so; `recover_run` looks for it.
REFUSED_REASON_PREFIX = "checkpoint refused at"
ENVELOPE_KEYS = frozenset({"schema_version", "key_id", "mac", "state"})


def _observation_state(observation) -> dict | None:
    if observation is None:
        return None
    return {
        "id": str(observation.id),
        "source": observation.source,
        "ref": observation.ref,
        "content_hash": observation.content_hash,
        "summary": observation.summary,
    }


def pending_action_state(action: Action) -> dict:
    """The frozen intent as a checkpoint holds it (its observation must be loaded)."""
    return {
        "id": str(action.id),
        "run_id": str(action.run_id),
        "action_id": action.action_id,
        "tool": action.tool,
        "target": action.target,
        "args": action.args,
        "contract_version": action.contract_version,
        "idempotency_key": action.idempotency_key,
        "intent_digest": action.intent_digest,
        "status": action.status,
        "needs_approval": action.needs_approval,
        "observation": _observation_state(action.observation),
    }


def approval_state(action: Action, grants: list) -> dict | None:
    """The binding of the approving `grants` of `action`, as a checkpoint holds it."""
    if action.needs_approval and not grants:
        return None
    if not grants:
        return {"decision": "not_required", "intent_digest": action.intent_digest}
    return {
        "decision": "approve",
        "intent_digest": action.intent_digest,
        "state_version": action.base_version,
        "target_scope": action.target,
        "expires_at": to_json_value("deadline", min(a.expires_at for a in grants)),
        "approvers": sorted(str(a.approver_id) for a in grants),
    }


def state_document(
    run: Run,
    *,
    pending: dict | None,
    approval: dict | None,
    in_doubt: list,
    open_plan: dict | None = None,
) -> dict:
    """The checkpoint state of `run` from its parts; no queries (runs.record.carry builds
    the parts that must be carried forward from the last verified checkpoint)."""
    fields = run_state(run)
    detached: dict = {}
    plan = _inline_or_detached("plan", run.plan, detached)
    versions = _inline_or_detached("versions", run.versions, detached)
    return {
        "run_id": str(run.id),
        "tenant_id": str(run.tenant_id),
        "goal": run.goal,
        "phase": run.phase,
        "state_version": run.state_version,
        "last_event_seq": run.last_event_seq,
        "event_head_hash": run.event_head_hash,
        "plan": plan,
        "pending_work": run.pending_work,
        "pending_action": pending,
        "approval": approval,
        "open_plan": open_plan,
        "completed": {"count": run.completed_count, "digest": run.completed_digest},
        "in_doubt_actions": in_doubt,
        "budget": {"limit": run.budget_limit, "used": run.budget_used},
        "deadline": fields["deadline"],
        "versions": versions,
        "detached": detached,
        "next_eligible_at": fields["next_eligible_at"],
        "retry_count": run.retry_count,
        "stop_reason": run.stop_reason,
        "evidence": run.evidence,
    }


def _inline_or_detached(field: str, value: dict, detached: dict) -> dict:
    """Agent data the checkpoint signs inline while small; past DETACH_BYTES it signs the
    data's digest and size in `detached` instead (the run's row keeps the data, an export
    carries it beside the envelope): a checkpoint is written on every change of the run, and
    must not copy a large plan each time."""
    if not value:
        return value
    data = canonical_json(value)
    if len(data) <= DETACH_BYTES:
        return value
    detached[field] = {"digest": content_hash(data), "bytes": len(data)}
    return {}


def _signed_part(schema_version: int, key_id: str, state: bytes) -> bytes:
    """canonical_json({"schema_version", "key_id", "state"}) around the state's canonical
    bytes, which are written once for both the MAC and the envelope (keys in JCS order)."""
    return b"".join(
        (
            b'{"key_id":',
            canonical_json(key_id),
            b',"schema_version":',
            canonical_json(schema_version),
            b',"state":',
            state,
            b"}",
        )
    )


def sign_state(state: dict) -> tuple[str, str]:
    """Returns (key id, envelope text) for `state`, signed with the current key: the
    envelope is canonical_json({"schema_version", "key_id", "mac", "state"})."""
    key_id = signing.current_key_id()
    state_json = canonical_json(state)
    key_id, mac = signing.sign(_signed_part(SCHEMA_VERSION, key_id, state_json))
    envelope = b"".join(
        (
            b'{"key_id":',
            canonical_json(key_id),
            b',"mac":',
            canonical_json(mac),
            b',"schema_version":',
            canonical_json(SCHEMA_VERSION),
            b',"state":',
            state_json,
            b"}",
        )
    )
    return key_id, envelope.decode()


def checkpoints_write(states: list[tuple[Run, dict]]) -> list[Checkpoint]:
    """Signs each run's `state` (built by runs.record.carry.build_state or, from rows
    already in hand, by state_document) at the run's current version: one INSERT ... ON
    CONFLICT DO UPDATE for all of them, inside the transaction that changed the runs."""
    rows = []
    for run, state in states:
        key_id, body = sign_state(state)
        rows.append(
            Checkpoint(
                run=run,
                state_version=run.state_version,
                schema_version=SCHEMA_VERSION,
                key_id=key_id,
                body=body,
            )
        )
    return rows_insert(
        rows,
        conflict=(["run", "state_version"], ["schema_version", "key_id", "body"]),
    )


def _parse(text: str | bytes) -> dict:
    try:
        envelope = parse_strict(text)
    except StrictJSONError as error:
        raise CheckpointError("parse", str(error)) from None
    if not isinstance(envelope, dict) or set(envelope) != ENVELOPE_KEYS:
        found = sorted(envelope) if isinstance(envelope, dict) else type(envelope).__name__
        raise CheckpointError("envelope", f"expected keys {sorted(ENVELOPE_KEYS)}, got {found}")
    if not isinstance(envelope["key_id"], str) or not isinstance(envelope["mac"], str):
        raise CheckpointError("envelope", "key_id and mac must be strings")
    if not isinstance(envelope["state"], dict):
        raise CheckpointError("envelope", "state must be an object")
    return envelope


def _check_schema_version(version) -> None:
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(
            "schema_version", f"schema_version must be an integer, got {version!r}"
        )
    if version > SCHEMA_VERSION:
        raise CheckpointError(
            "schema_version",
            f"written by a newer Countersign (schema v{version}, this server knows up to "
            f"v{SCHEMA_VERSION}); upgrade this server or restore the run by hand",
        )
    if version < SCHEMA_VERSION and version not in UPGRADERS:
        raise CheckpointError(
            "schema_version",
            f"schema v{version} has no upgrader; restore the run by hand from its events",
        )


def _upgrade(version: int, state: dict) -> dict:
    while version < SCHEMA_VERSION:
        state = UPGRADERS[version](state)
        version += 1
    return state


def checkpoint_verify(
    text: str | bytes, *, run: Run | None = None, lease: LeaseToken | None = None
) -> dict:
    """Verifies a checkpoint and returns its (upgraded) state. With `run`, it must be that
    run's latest state; with `lease`, the caller must still hold the run's lease."""
    envelope = _parse(text)
    version = envelope["schema_version"]
    _check_schema_version(version)
    try:
        signing.verify(
            _signed_part(version, envelope["key_id"], canonical_json(envelope["state"])),
            kid=envelope["key_id"],
            mac=envelope["mac"],
        )
    except signing.SignatureError as error:
        raise CheckpointError("mac", str(error)) from None
    state = _upgrade(version, envelope["state"])
    check_invariants(state)
    if run is not None:
        if state["run_id"] != str(run.pk) or state["tenant_id"] != str(run.tenant_id):
            raise CheckpointError("freshness", "the checkpoint belongs to another run")
        if state["state_version"] != run.state_version:
            raise CheckpointError(
                "freshness",
                f"the checkpoint is at version {state['state_version']}, "
                f"the run at {run.state_version}",
            )
    if lease is not None:
        try:
            check_lease(lease)
        except LeaseLost as error:
            raise CheckpointError("lease", str(error)) from None
    return state


def latest_checkpoint(run: Run) -> Checkpoint | None:
    return run.checkpoints.order_by("-state_version").first()


def latest_verified(run: Run, *, lease: LeaseToken | None = None) -> tuple[Checkpoint, dict]:
    """The run's latest checkpoint and its verified state; CheckpointError when there is none
    or it does not verify (against the run, and the lease when one is given)."""
    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        raise CheckpointError("parse", "the run has no checkpoint")
    return checkpoint, checkpoint_verify(checkpoint.body, run=run, lease=lease)
