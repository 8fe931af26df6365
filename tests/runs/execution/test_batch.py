"""The batched protocol: a claim's actions begun in one transaction, recorded in one.

Driven in-process through drain() and process_claims() with `bench.noop` (a deduplicating
tool that can be queried by key, so its attempts are begun in batches): the rows, events and
signed checkpoints must be exactly what the single protocol writes, with a fraction of
the commits, and any guard that fails keeps the single protocol's answer.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.utils import timezone

from bench.commits import counting_transactions
from bench.tools import BenchNoop
from control.models import Membership
from runs.exceptions import StaleState
from runs.execution import batch
from runs.execution.drain import drain, process_claims
from runs.execution.worker import claim_ready
from runs.models import Action, Approval, Attempt, Checkpoint, Lease, Receipt, Run
from runs.record.authored import authored
from runs.record.carry import build_state, checkpoint_write
from runs.record.checkpoints import checkpoint_verify, sign_state
from runs.record.events import append_event
from runs.record.verification import run_verify
from runs.services import lease_claim, run_cancel
from runs.tools.registry import get_tool, register_tool, unregister_tool
from runs.tools.retry import DEFAULT_POLICY
from tests.factories import (
    approve,
    make_action,
    make_run,
    make_tenant,
    make_user,
)

pytestmark = pytest.mark.django_db(transaction=True)


def approved_noops(count: int) -> list[Action]:
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = []
    for number in range(count):
        action = make_action(
            make_run(tenant), tool="bench.noop", target=f"noop-{number}", args={"n": number}
        )
        approve(action, operator)
        actions.append(action)
    return actions


def batch_steps(claims) -> list[batch.Step]:
    """The batch's steps for `claims` of bench.noop intents, as the drain reads them."""
    tool = get_tool("bench.noop")
    loaded = Action.objects.select_related("run", "run__tenant", "observation", "plan")
    return [
        batch.Step(action=loaded.get(pk=pk), lease=lease, tool=tool, policy=DEFAULT_POLICY)
        for pk, lease in claims
    ]


@pytest.mark.postgresql
def test_twenty_approved_writes_take_two_write_commits_and_write_what_one_by_one_would(
    noop_tool,
):
    actions = approved_noops(20)

    with counting_transactions() as counted:
        assert drain(worker="batch-worker") == 20

    pks = [a.pk for a in actions]
    assert set(Action.objects.filter(pk__in=pks).values_list("status", flat=True)) == {"succeeded"}
    assert Receipt.objects.filter(action__in=pks).count() == 20
    # One transaction began all twenty attempts.
    assert Attempt.objects.filter(action__in=pks).values("started_at").distinct().count() == 1
    # The claim, the begin, the receipts, and the claim that finds nothing and ends the
    # drain (it asks for row locks): 0.2 write commits per action, where one by one took 2.
    assert counted.writes == 4, counted
    # About 2.3 statements per action (one by one: 38); the lease fence before each call
    # is one of them.
    assert counted.statements <= 3 * 20, counted
    for action in actions:
        run = action.run
        run.refresh_from_db()
        assert run_verify(run) == []
        # The begin is rows only: the write's one event and one checkpoint are its outcome's.
        assert list(run.events.order_by("seq").values_list("type", flat=True))[-2:] == [
            "action.approved",
            "action.succeeded",
        ]
        assert run.budget_used == 1
        # The checkpoint the send rested on holds the bound intent; the last is byte for
        # byte what checkpoint_write would sign now.
        last, approved = run.checkpoints.order_by("-state_version")[:2]
        assert last.state_version == approved.state_version + 1
        held = checkpoint_verify(approved.body)
        assert held["pending_action"]["status"] == "approved"
        assert held["approval"]["intent_digest"] == action.intent_digest
        assert last.body == sign_state(build_state(run))[1]
        assert Lease.objects.get(run=run).expires_at <= timezone.now()


def test_a_grant_that_no_longer_holds_is_refused_alone_and_the_rest_are_sent(noop_tool):
    actions = approved_noops(5)
    refused = actions[2]
    # Its approver is no longer an operator here; the others' approver still is.
    leaver = make_user(refused.run.tenant, "operator")
    Approval.objects.filter(action=refused).update(approver=leaver)
    Checkpoint.objects.filter(run=refused.run).delete()
    refused.run.refresh_from_db()
    with transaction.atomic():  # signed with the grant as it now stands, as a service would
        authored([refused.pk, *refused.approvals.values_list("pk", flat=True)])
        checkpoint_write(refused.run)
    Membership.objects.filter(user=leaver).delete()

    drain(worker="batch-worker")

    statuses = dict(
        Action.objects.filter(pk__in=[a.pk for a in actions]).values_list("pk", "status")
    )
    assert statuses.pop(refused.pk) == "failed"
    assert set(statuses.values()) == {"succeeded"}
    assert Action.objects.get(pk=refused.pk).error_class == "grant_role"
    assert not Attempt.objects.filter(action=refused).exists()
    assert refused.run.events.filter(type="action.refused").count() == 1
    for action in actions:
        action.run.refresh_from_db()
        assert run_verify(action.run) == []


def test_a_lease_taken_over_before_the_batch_begins_writes_nothing_for_that_run(noop_tool):
    actions = approved_noops(3)
    claims = claim_ready(worker="slow-worker")
    taken = actions[1].run_id
    Lease.objects.filter(run_id=taken).update(expires_at=timezone.now())
    lease_claim(run_id=taken, owner="other-worker")

    assert process_claims(claims, worker="slow-worker") == []

    assert not Attempt.objects.filter(action=actions[1]).exists()
    assert Action.objects.get(pk=actions[1].pk).status == "approved"
    assert Lease.objects.get(run_id=taken).owner == "other-worker"
    for action in (actions[0], actions[2]):
        assert Action.objects.get(pk=action.pk).status == "succeeded"


@pytest.mark.postgresql
def test_a_row_moved_after_it_was_read_keeps_nothing_of_the_batch(noop_tool):
    actions = approved_noops(4)
    claims = claim_ready(worker="batch-worker")
    steps = batch_steps(claims)
    versions = {a.run_id: a.run.state_version for a in actions}
    checkpoints = Checkpoint.objects.filter(run_id__in=versions).count()
    # Another writer moves one action after the batch read it.
    Action.objects.filter(pk=actions[3].pk).update(status="cancelled")

    with pytest.raises(StaleState):
        batch.attempts_begin(steps, worker="batch-worker")

    assert not Attempt.objects.filter(action__in=actions).exists()
    assert Checkpoint.objects.filter(run_id__in=versions).count() == checkpoints
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, state_version FROM runs_run WHERE id = ANY(%s)",
            [[str(run_id) for run_id in versions]],
        )
        assert dict(cursor.fetchall()) == versions
    # The single protocol then sends the others and leaves the cancelled one alone.
    assert process_claims(claims, worker="batch-worker") == []
    statuses = [Action.objects.get(pk=a.pk).status for a in actions]
    assert statuses == ["succeeded", "succeeded", "succeeded", "cancelled"]


def test_a_run_that_moved_after_the_batch_read_it_begins_nothing_and_the_grant_is_refused(
    noop_tool,
):
    # The begin writes rows of the action only; the run's state must still be the one its
    # grant was checked against: another writer's event, appended after the batch read the
    # run and before its begin, moves the run without touching the action.
    actions = approved_noops(3)
    claims = claim_ready(worker="batch-worker")
    steps = batch_steps(claims)
    moved = actions[1]
    with transaction.atomic():
        run = Run.objects.get(pk=moved.run_id)
        append_event(run, type="run.noted", actor="another-writer")
        checkpoint_write(run)

    with pytest.raises(StaleState, match="runs changed since read"):
        batch.attempts_begin(steps, worker="batch-worker")

    assert not Attempt.objects.filter(action__in=actions).exists()
    assert set(
        Action.objects.filter(pk__in=[a.pk for a in actions]).values_list("status", flat=True)
    ) == {"approved"}
    # One by one, the run that moved since its approval is refused; the others are sent.
    assert process_claims(claims, worker="batch-worker") == []
    statuses = [Action.objects.get(pk=a.pk).status for a in actions]
    assert statuses == ["succeeded", "failed", "succeeded"]
    assert Action.objects.get(pk=moved.pk).error_class == "grant_state_version"
    assert not Attempt.objects.filter(action=moved).exists()


class CancellingNoop(BenchNoop):
    """The no-op, except that while its call for `target` is out, an operator cancels that
    call's run: the batch's receipts then find a run moved since the batch read it."""

    name = "bench.cancelling"
    target = ""

    def execute(self, call, *, timeout):
        if call.target == type(self).target:
            run = Run.objects.get(actions__idempotency_key=call.idempotency_key)
            run_cancel(run=run, reason="the customer called", actor="operator")
        return super().execute(call, timeout=timeout)


def test_a_run_cancelled_while_its_write_is_out_keeps_the_receipt_and_its_phase():
    tool = CancellingNoop()
    register_tool(tool)
    try:
        tenant = make_tenant()
        operator = make_user(tenant, "operator")
        actions = []
        for number in range(3):
            action = make_action(
                make_run(tenant), tool="bench.cancelling", target=f"noop-{number}", args={}
            )
            approve(action, operator)
            actions.append(action)
        CancellingNoop.target = "noop-1"

        assert drain(worker="batch-worker") == 3
    finally:
        unregister_tool(tool)

    # The batch's receipts found the cancelled run moved and kept nothing; one by one,
    # every write that went out has its receipt, and the cancelled run stays cancelled.
    assert Receipt.objects.filter(action__in=actions).count() == 3
    for action in actions:
        action.refresh_from_db()
        action.run.refresh_from_db()
        assert action.status == "succeeded"
        assert run_verify(action.run) == []
    assert [a.run.phase for a in actions] == ["running", "cancelled", "running"]
