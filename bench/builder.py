"""Builds runs in bulk, exactly as the services would have left them, and COPYs them in.

Going through runs.services costs ~40 queries and a signed checkpoint per run (tens of ms on
a loaded 2-core machine), far too slow for 10,000 runs and a million events. This module
computes the same rows in Python with the same helpers the services use (idempotency keys,
intent digests, the event hash chain, the signed checkpoint envelope) and streams them with
PostgreSQL's COPY. Each event's type, payload and changes come from runs.record.payloads,
the functions the services themselves append with, so the two cannot drift apart. tests/bench
proves the result equal to the services' own: every seeded run passes `verify_run`, its
checkpoint is byte-for-byte what `checkpoint_write` signs, and its events match, one by one,
those of a run taken through the services.

A built run is `waiting_approval` (an intent waiting for a decision) or `executing` (the
intent approved, its Approval row, event and outbox message in place, ready for a worker).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, models, transaction
from django.db.models.fields import AutoFieldMixin

from control.foundation.canonical import idempotency_key, intent_digest
from control.models import Tenant
from runs.models import (
    Action,
    Approval,
    Checkpoint,
    Lease,
    Observation,
    OutboxMessage,
    Run,
    RunEvent,
)
from runs.record.checkpoints import (
    SCHEMA_VERSION,
    approval_state,
    pending_action_state,
    sign_state,
    state_document,
)
from runs.record.events import GENESIS_HASH, event_hash, to_json_value
from runs.record.outbox import EXECUTE_JOB
from runs.record.payloads import (
    action_approved,
    action_proposed,
    observation_recorded,
    run_started,
)

Status = Action.Status
AGENT = "bench-agent"
# COPY in slices so a million events never sit in memory at once.
SLICE = 500


@dataclass
class BuiltRun:
    run: Run
    lease: Lease
    observations: list[Observation]
    action: Action | None
    approval: Approval | None
    events: list[RunEvent]
    checkpoint: Checkpoint
    outbox: OutboxMessage | None = None


@dataclass
class RunSpec:
    """What to build: `observations` extra observation events make a long timeline."""

    tenant: Tenant
    tool: str | None  # None: a run that only observed so far (no intent, phase running)
    target: str = ""
    args: dict = field(default_factory=dict)
    goal: str = "benchmark: one approved write"
    action_id: str = "write"
    observations: int = 1
    approver: object | None = None  # a user: the run is built approved (executing)
    created_at: datetime | None = None
    approval_seconds: int = 24 * 3600
    extra: dict = field(default_factory=dict)


class _Chain:
    """Appends events to an in-memory run the way runs.record.events.append_event does."""

    def __init__(self, run: Run, now: datetime) -> None:
        self.run = run
        self.now = now
        self.events: list[RunEvent] = []

    def append(self, *, type: str, actor: str, changes=None, action=None, payload=None):
        run = self.run
        changes = {name: to_json_value(name, value) for name, value in (changes or {}).items()}
        event = RunEvent(
            run=run,
            seq=run.last_event_seq + 1,
            type=type,
            action=action,
            actor=actor[:150],
            payload=payload or {},
            changes=changes,
            created_at=self.now + timedelta(microseconds=len(self.events)),
            prev_hash=run.event_head_hash or GENESIS_HASH,
        )
        event.hash = event_hash(prev_hash=event.prev_hash, event=event)
        for name, value in changes.items():
            setattr(run, name, value)
        run.state_version += 1
        run.last_event_seq = event.seq
        run.event_head_hash = event.hash
        self.events.append(event)
        return event


def build_run(spec: RunSpec, *, now: datetime) -> BuiltRun:
    created = spec.created_at or now
    run = Run(
        id=uuid.uuid4(),
        tenant=spec.tenant,
        goal=spec.goal,
        created_by=AGENT,
        created_at=created,
        updated_at=now,
    )
    chain = _Chain(run, created)
    chain.append(
        actor=AGENT,
        **run_started(goal=spec.goal, plan=None, budget_limit=None, deadline=None, versions=None),
    )
    observations = []
    for number in range(spec.observations):
        summary = f"observation {number} of run {run.id}"
        observation = Observation(
            id=uuid.uuid4(),
            tenant=spec.tenant,
            run=run,
            source="bench.seed",
            ref=f"ref-{number}",
            content_hash="sha256:" + hashlib.sha256(summary.encode()).hexdigest(),
            summary=summary,
            created_at=created,
        )
        observations.append(observation)
        chain.append(actor=AGENT, **observation_recorded(observation=observation))
    observation = observations[-1] if observations else None
    if spec.tool is None:
        return _finish(run, chain, observations, None, None, now=now)
    digest = intent_digest(tool=spec.tool, target=spec.target, args=spec.args)
    key = idempotency_key(
        run_id=str(run.id), action_id=spec.action_id, target=spec.target, contract_version="v1"
    )
    expires_at = now + timedelta(seconds=spec.approval_seconds)
    action = Action(
        id=uuid.uuid4(),
        tenant=spec.tenant,
        run=run,
        action_id=spec.action_id,
        tool=spec.tool,
        target=spec.target,
        args=spec.args,
        contract_version="v1",
        idempotency_key=key,
        intent_digest=digest,
        observation=observation,
        proposed_by=AGENT,
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        status=Status.WAITING_APPROVAL,
        base_version=run.state_version + 1,
        base_event_seq=run.last_event_seq + 1,
        expires_at=expires_at,
        created_at=created,
        updated_at=now,
    )
    chain.append(actor=AGENT, action=action, **action_proposed(run=run, action=action))
    approval = outbox = None
    if spec.approver is not None:
        approval = Approval(
            id=uuid.uuid4(),
            tenant=spec.tenant,
            action=action,
            decision=Approval.Decision.APPROVE,
            approver=spec.approver,
            intent_digest=digest,
            state_version=action.base_version,
            target_scope=spec.target,
            expires_at=expires_at,
            created_at=now,
        )
        action.status = Status.APPROVED
        action.next_attempt_at = now
        chain.append(
            actor=spec.approver.get_username(), action=action, **action_approved(approvals=1)
        )
        outbox = OutboxMessage(
            tenant=spec.tenant, job=EXECUTE_JOB, run=run, action=action, created_at=now
        )
    return _finish(run, chain, observations, action, approval, now=now, outbox=outbox)


def _finish(
    run: Run,
    chain: _Chain,
    observations: list[Observation],
    action: Action | None,
    approval: Approval | None,
    *,
    now: datetime,
    outbox: OutboxMessage | None = None,
) -> BuiltRun:
    key_id, body = sign_state(_checkpoint_state(run, action, approval))
    checkpoint = Checkpoint(
        run=run,
        state_version=run.state_version,
        schema_version=SCHEMA_VERSION,
        key_id=key_id,
        body=body,
        created_at=now,
    )
    return BuiltRun(
        run=run,
        lease=Lease(run=run),
        observations=observations,
        action=action,
        approval=approval,
        events=chain.events,
        checkpoint=checkpoint,
        outbox=outbox,
    )


def _checkpoint_state(run: Run, action: Action | None, approval: Approval | None) -> dict:
    """runs.record.checkpoints.build_state for a run with at most one (open) action, no queries."""
    return state_document(
        run,
        pending=pending_action_state(action) if action is not None else None,
        approval=approval_state(action, [approval] if approval else [])
        if action is not None
        else None,
        in_doubt=[],
    )


def copy_fields(model: type[models.Model]) -> list[models.Field]:
    return [
        f
        for f in model._meta.concrete_fields
        if not (f.primary_key and isinstance(f, AutoFieldMixin))
    ]


def copy_rows(model: type[models.Model], objects: Iterable[models.Model]) -> int:
    """COPYs unsaved model instances into the model's table; returns the row count."""
    fields = copy_fields(model)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    count = 0
    with connection.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for obj in objects:
            copy.write_row(
                [f.get_db_prep_save(getattr(obj, f.attname), connection) for f in fields]
            )
            count += 1
    return count


def _slices(items: Iterable, size: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def insert_built(built: list[BuiltRun]) -> list[OutboxMessage]:
    """Inserts built runs in one transaction (parents first); returns the outbox messages
    with their primary keys, for the caller to relay."""
    with transaction.atomic():
        copy_rows(Run, (b.run for b in built))
        copy_rows(Lease, (b.lease for b in built))
        copy_rows(Observation, (o for b in built for o in b.observations))
        copy_rows(Action, (b.action for b in built if b.action is not None))
        copy_rows(Approval, (b.approval for b in built if b.approval is not None))
        copy_rows(RunEvent, (e for b in built for e in b.events))
        copy_rows(Checkpoint, (b.checkpoint for b in built))
        with_outbox = [b for b in built if b.outbox is not None]
        copy_rows(OutboxMessage, (b.outbox for b in with_outbox))
    if not with_outbox:
        return []
    return list(
        OutboxMessage.objects.filter(
            action_id__in=[b.action.pk for b in with_outbox], delivered_at__isnull=True
        ).order_by("pk")
    )


def build_and_insert(
    specs: Iterable[RunSpec], *, now: datetime, progress=None
) -> tuple[int, int, list]:
    """Builds and inserts runs slice by slice; returns (runs, events, outbox messages).
    `progress(runs, events)` is called after each slice."""
    runs = events = 0
    messages: list[OutboxMessage] = []
    for batch in _slices(specs, SLICE):
        built = [build_run(spec, now=now) for spec in batch]
        messages.extend(insert_built(built))
        runs += len(built)
        events += sum(len(b.events) for b in built)
        if progress is not None:
            progress(runs, events)
    return runs, events, messages
