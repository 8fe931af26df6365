"""The run's event log: every change is one event and one state version, hash-chained.

An event carries the `changes` it made to the run's replayed fields, so folding a run's
events rebuilds its state without any I/O (`replay`), and `verify_chain` proves no event
was edited, deleted or reordered.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from control.foundation.canonical import canonical_json
from runs.exceptions import LeaseLost, StaleState
from runs.models import Action, Lease, Run, RunEvent
from runs.record.completed import completed_fold
from runs.record.direct_sql import rows_insert, runs_compare_and_set, runs_lock

GENESIS_HASH = "sha256:" + "0" * 64
REPLAYED_FIELDS = (
    "goal",
    "phase",
    "plan",
    "pending_work",
    "budget_limit",
    "budget_used",
    "deadline",
    "versions",
    "next_eligible_at",
    "retry_count",
    "stop_reason",
    "evidence",
)
DATETIME_FIELDS = frozenset({"deadline", "next_eligible_at"})


@dataclass(frozen=True)
class LeaseToken:
    """Proof that a worker holds a run's lease at `version` (the fencing token)."""

    run_id: str
    owner: str
    version: int


def to_json_value(field: str, value):
    if field in DATETIME_FIELDS and isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return value


def from_json_value(field: str, value):
    if field in DATETIME_FIELDS and isinstance(value, str):
        return parse_datetime(value)
    return value


def run_state(run: Run) -> dict:
    """The run's replayed fields as JSON values."""
    return {field: to_json_value(field, getattr(run, field)) for field in REPLAYED_FIELDS}


def event_hash(*, prev_hash: str, event: RunEvent) -> str:
    fields = {
        "run": str(event.run_id),
        "seq": event.seq,
        "type": event.type,
        "action": str(event.action_id) if event.action_id else None,
        "actor": event.actor,
        "payload": event.payload,
        "changes": event.changes,
        "created_at": event.created_at.isoformat(),
    }
    return "sha256:" + hashlib.sha256(prev_hash.encode() + canonical_json(fields)).hexdigest()


def check_lease(lease: LeaseToken) -> None:
    """Inside a transaction, locks the lease row so no takeover can interleave with the
    guarded write that follows."""
    held = Lease.objects.filter(
        run_id=lease.run_id, owner=lease.owner, lease_version=lease.version, expires_at__gt=Now()
    )
    if transaction.get_connection().in_atomic_block:
        held = held.select_for_update()
    if not held.exists():
        raise LeaseLost(f"lease v{lease.version} on run {lease.run_id} is no longer held")


def append_event(
    run: Run,
    *,
    type: str,
    actor: str,
    changes: dict | None = None,
    action: Action | None = None,
    payload: dict | None = None,
    lease: LeaseToken | None = None,
    completed: dict | None = None,
) -> RunEvent:
    """Applies `changes` to the run as one compare-and-set on its state_version and appends
    the event that records them; `completed`, the entry of a receipt this event records,
    is chained onto the run's completed digest in the same statement. Must run inside the
    caller's transaction."""
    event, db_values = next_event(
        run,
        type=type,
        actor=actor,
        changes=changes,
        action=action,
        payload=payload,
        completed=completed,
    )
    if lease is not None:
        check_lease(lease)
    expected = run.state_version
    updated = Run.objects.filter(pk=run.pk, state_version=expected).update(
        **db_values,
        state_version=expected + 1,
        last_event_seq=event.seq,
        event_head_hash=event.hash,
        updated_at=event.created_at,
    )
    if updated != 1:
        raise StaleState(f"run {run.pk} changed since version {expected}")
    _advanced(run, event, db_values)
    event.save(force_insert=True)
    return event


def runs_hold(runs: list[Run]) -> None:
    """Locks each run's row at the version in hand until the caller's transaction ends: the
    guard of a step that changes rows of the runs but not their state (an attempt begun is
    rows only; its outcome is the event). Nothing can append to a held run meanwhile, and
    StaleState says one moved since it was read, as an event's compare-and-set would."""
    versions = {str(run.pk): run.state_version for run in runs}
    rows = runs_lock(list(versions))
    found = {str(pk): version for pk, version in rows}
    if moved := [pk for pk, version in versions.items() if found.get(pk) != version]:
        raise StaleState(f"{len(moved)} of {len(versions)} runs changed since read")


def append_events(appends: list[tuple[Run, dict]]) -> list[RunEvent]:
    """append_event for many runs, one event each (keyword arguments as append_event's,
    without `lease`: the caller has checked and locked every lease): one compare-and-set
    UPDATE of all the runs and one INSERT of all the events. StaleState when any run moved
    since it was read; the caller's transaction must then keep nothing of the batch."""
    if not appends:
        return []
    planned = [(run, *next_event(run, **spec)) for run, spec in appends]
    fields = sorted(set().union(*(db_values for _, _, db_values in planned)))
    rows = [
        {
            "id": run.pk,
            "expected": run.state_version,
            "state_version": run.state_version + 1,
            "last_event_seq": event.seq,
            "event_head_hash": event.hash,
            "updated_at": event.created_at,
            **{field: db_values.get(field, getattr(run, field)) for field in fields},
        }
        for run, event, db_values in planned
    ]
    updated = runs_compare_and_set(
        rows, fields=["state_version", "last_event_seq", "event_head_hash", "updated_at", *fields]
    )
    if updated != len(planned):
        raise StaleState(f"{len(planned) - updated} of {len(planned)} runs changed since read")
    for run, event, db_values in planned:
        _advanced(run, event, db_values)
    return rows_insert([event for _, event, _ in planned])


def next_event(
    run: Run,
    *,
    type: str,
    actor: str,
    changes: dict | None = None,
    action: Action | None = None,
    payload: dict | None = None,
    completed: dict | None = None,
) -> tuple[RunEvent, dict]:
    """The run's next event, hashed onto its chain, and the run's column values it sets."""
    changes = {field: to_json_value(field, value) for field, value in (changes or {}).items()}
    unknown = set(changes) - set(REPLAYED_FIELDS)
    if unknown:
        raise ValueError(f"not replayed fields: {sorted(unknown)}")
    event = RunEvent(
        run=run,
        seq=run.last_event_seq + 1,
        type=type,
        action=action,
        actor=actor[:150],
        payload=payload or {},
        changes=changes,
        created_at=timezone.now(),
        prev_hash=run.event_head_hash or GENESIS_HASH,
    )
    event.hash = event_hash(prev_hash=event.prev_hash, event=event)
    db_values = {field: from_json_value(field, value) for field, value in changes.items()}
    if completed is not None:
        db_values["completed_count"], db_values["completed_digest"] = completed_fold(
            [completed], count=run.completed_count, digest=run.completed_digest
        )
    return event, db_values


def _advanced(run: Run, event: RunEvent, db_values: dict) -> None:
    """The run object in hand, once its row holds `event`."""
    for field, value in db_values.items():
        setattr(run, field, value)
    run.state_version += 1
    run.last_event_seq = event.seq
    run.event_head_hash = event.hash
    run.updated_at = event.created_at


def replay(events) -> dict:
    """Folds events into the run's replayed fields; pure, no I/O."""
    state: dict = {}
    for event in events:
        state.update(event.changes)
    return state


def verify_chain(run: Run) -> list[str]:
    """Problems in the run's event chain: gaps, reordering, edits; empty when intact."""
    problems = []
    prev_hash = GENESIS_HASH
    expected_seq = 1
    for event in RunEvent.objects.filter(run=run).order_by("seq").iterator(chunk_size=2000):
        if event.seq != expected_seq:
            problems.append(f"event #{expected_seq} is missing (next is #{event.seq})")
            expected_seq = event.seq
        if event.prev_hash != prev_hash:
            problems.append(f"event #{event.seq} does not link to the event before it")
        if event_hash(prev_hash=event.prev_hash, event=event) != event.hash:
            problems.append(f"event #{event.seq} was altered")
        prev_hash = event.hash
        expected_seq += 1
    if expected_seq - 1 != run.last_event_seq:
        problems.append(f"the log ends at #{expected_seq - 1}, the run says #{run.last_event_seq}")
    if prev_hash != (run.event_head_hash or GENESIS_HASH):
        problems.append("the last event's hash is not the run's recorded head")
    return problems
