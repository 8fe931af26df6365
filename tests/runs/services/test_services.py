"""Each run service, what it records, and each of its refusals."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from control.foundation.canonical import idempotency_key, intent_digest
from runs.exceptions import (
    GrantMismatch,
    IntentConflict,
    InvalidArguments,
    InvalidTransition,
    MissingEvidence,
    NotAllowed,
    StaleState,
)
from runs.models import Action, Approval, OutboxMessage, Run
from runs.services import (
    action_ask_again,
    action_edit_and_approve,
    action_propose,
    approval_decide,
    approval_expire,
    run_cancel,
    run_complete,
    run_start,
)
from tests.factories import (
    approve,
    make_action,
    make_observation,
    make_policy,
    make_run,
    make_tenant,
    make_user,
    reject,
)

pytestmark = pytest.mark.django_db


def event_types(run: Run) -> list[str]:
    return list(run.events.order_by("seq").values_list("type", flat=True))


def test_run_start_records_version_event_checkpoint_and_lease():
    run = make_run(make_tenant(), budget_limit=5)
    run.refresh_from_db()
    assert (run.phase, run.state_version, run.last_event_seq) == ("running", 1, 1)
    assert event_types(run) == ["run.started"]
    assert run.checkpoints.get().state_version == 1
    assert run.lease.lease_version == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"goal": "  "}, "goal must not be empty"),
        ({"budget_limit": 0}, "positive"),
        ({"deadline": timezone.now() - timedelta(seconds=1)}, "already past"),
    ],
)
def test_run_start_refuses_bad_input_and_writes_nothing(fields, message):
    tenant = make_tenant()
    with pytest.raises(InvalidArguments, match=message):
        run_start(tenant=tenant, created_by="agent", **{"goal": "g", **fields})
    assert not Run.objects.exists()


def test_observation_record_refuses_a_malformed_hash():
    run = make_run(make_tenant())
    from runs.services import observation_record

    with pytest.raises(InvalidArguments, match="content_hash"):
        observation_record(
            run=run, source="s", ref="r", content_hash="md5:abc", summary="x", actor="agent"
        )
    run.refresh_from_db()
    assert run.state_version == 1


def test_action_propose_freezes_key_and_digest_and_waits_for_approval():
    run = make_run(make_tenant())
    action = make_action(run, args={"resolution": "fixed"})
    run.refresh_from_db()
    assert action.idempotency_key == idempotency_key(
        run_id=str(run.pk), action_id="close-ticket", target="ticket-7", contract_version="v1"
    )
    assert action.intent_digest == intent_digest(
        tool="ticket.close", target="ticket-7", args={"resolution": "fixed"}
    )
    assert (action.status, run.phase, run.pending_work) == (
        "waiting_approval",
        "waiting_approval",
        ["close-ticket"],
    )
    assert action.base_version == run.state_version
    assert event_types(run)[-1] == "action.proposed"


def test_the_same_logical_action_with_the_same_digest_returns_the_existing_intent():
    run = make_run(make_tenant())
    first = make_action(run)
    again, created = action_propose(
        run=run,
        action_id="close-ticket",
        tool="ticket.close",
        target="ticket-7",
        args={"resolution": "fixed"},
        contract_version="v1",
        proposed_by="agent-token",
    )
    assert (again.pk, created) == (first.pk, False)


def test_a_proposal_that_loses_the_race_for_the_runs_one_open_write_is_stale_state():
    # Read before another writer froze its intent: the phase still says running, so only
    # the one-open-write constraint stops the insert; the service says so, nothing is kept.
    run = make_run(make_tenant())
    read_before = Run.objects.get(pk=run.pk)
    winner = make_action(run)
    with pytest.raises(StaleState, match="another proposal on this run won the race"):
        action_propose(
            run=read_before,
            action_id="reopen-ticket",
            tool="ticket.close",
            target="ticket-8",
            args={"resolution": "fixed"},
            contract_version="v1",
            observation=winner.observation,
            proposed_by="agent-token",
        )
    assert list(Action.objects.filter(run=run).values_list("action_id", flat=True)) == [
        "close-ticket"
    ]


def test_the_same_logical_action_with_another_digest_is_a_conflict():
    run = make_run(make_tenant())
    make_action(run)
    run.refresh_from_db()
    with pytest.raises(IntentConflict, match="new action id"):
        action_propose(
            run=run,
            action_id="close-ticket",
            tool="ticket.close",
            target="ticket-8",
            args={"resolution": "fixed"},
            contract_version="v1",
            proposed_by="agent-token",
        )
    assert Action.objects.count() == 1


@pytest.mark.parametrize(
    ("tool", "version", "args"),
    [
        ("ticket.delete", "v1", {}),
        ("ticket.close", "v99", {"resolution": "fixed"}),
        ("ticket.close", "v1", {"resolution": "fixed", "extra": 1}),
    ],
)
def test_action_propose_refuses_unknown_tools_versions_and_arguments(tool, version, args):
    run = make_run(make_tenant())
    observation = make_observation(run)
    run.refresh_from_db()
    with pytest.raises(InvalidArguments):
        action_propose(
            run=run,
            action_id="a",
            tool=tool,
            target="ticket-7",
            args=args,
            contract_version=version,
            observation=observation,
            proposed_by="agent",
        )
    assert not Action.objects.exists()


@pytest.mark.parametrize(
    ("action_id", "rule"),
    [
        ("undo-close-ticket", "reserved for compensations"),
        ("UNDO-close-ticket", "reserved for compensations"),
        ("close-ticket~2", "reserved for edited and re-asked intents"),
        ("close~draft~10", "reserved for edited and re-asked intents"),
        # Look-alikes read as a person reads them (runs.action_ids): the service's own check
        # holds for a caller whose schema lets them through.
        ("undo\u2010close-ticket", "reserved for compensations"),
        ("\uff55ndo-close-ticket", "reserved for compensations"),
        ("close-ticket~\uff12", "reserved for edited and re-asked intents"),
        ("close-ticket\u301c2", "reserved for edited and re-asked intents"),
    ],
)
def test_action_propose_refuses_the_ids_the_service_derives_itself(action_id, rule):
    run = make_run(make_tenant())
    observation = make_observation(run)
    run.refresh_from_db()
    with pytest.raises(InvalidArguments, match=rule):
        action_propose(
            run=run,
            action_id=action_id,
            tool="ticket.close",
            target="ticket-7",
            args={"resolution": "fixed"},
            contract_version="v1",
            observation=observation,
            proposed_by="agent",
        )
    assert not Action.objects.exists()


@pytest.mark.parametrize("action_id", ["undone-ticket", "close~v2", "close-ticket-2", "redo-1"])
def test_ids_that_only_resemble_derived_ones_are_the_agents_to_use(action_id):
    assert make_action(make_run(make_tenant()), action_id=action_id).action_id == action_id


def test_an_action_that_needs_approval_must_rest_on_an_observation():
    run = make_run(make_tenant())
    with pytest.raises(InvalidArguments, match="observation"):
        action_propose(
            run=run,
            action_id="a",
            tool="ticket.close",
            target="ticket-7",
            args={"resolution": "fixed"},
            contract_version="v1",
            proposed_by="agent",
        )


def test_a_run_holds_one_pending_action_at_a_time():
    run = make_run(make_tenant())
    make_action(run)
    with pytest.raises(InvalidTransition, match="waiting_approval"):
        make_action(run, action_id="close-other", target="ticket-8")


def test_a_tool_whose_policy_needs_no_approval_goes_straight_to_execution():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", needs_approval=False)
    run = make_run(tenant)
    action = make_action(run)
    run.refresh_from_db()
    assert (action.status, run.phase) == ("approved", "executing")
    assert OutboxMessage.objects.filter(action=action, job="runs.jobs.execute_run").count() == 1


def test_approval_moves_the_action_to_execution_and_writes_the_outbox_message():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    action = make_action(make_run(tenant))
    approve(action, operator, reason="customer confirmed")
    action.run.refresh_from_db()
    grant = action.approvals.get()
    assert (action.status, action.run.phase) == ("approved", "executing")
    assert (grant.intent_digest, grant.state_version, grant.target_scope) == (
        action.intent_digest,
        action.base_version,
        "ticket-7",
    )
    assert OutboxMessage.objects.filter(action=action, job="runs.jobs.execute_run").count() == 1
    assert event_types(action.run)[-1] == "action.approved"


def test_rejection_returns_the_run_to_the_agent_with_the_reason():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    reject(action, make_user(tenant, "operator"), reason="wrong ticket")
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.status, action.decision_reason, action.run.phase) == (
        "rejected",
        "wrong ticket",
        "running",
    )
    assert not OutboxMessage.objects.filter(job="runs.jobs.execute_run").exists()


def test_only_an_operator_of_the_tenant_may_decide():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    for outsider in (make_user(tenant, "auditor"), make_user(make_tenant(), "operator")):
        with pytest.raises(NotAllowed):
            approve(action, outsider)
    assert not Approval.objects.exists()


def test_approval_refuses_what_the_approver_did_not_see():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    action = make_action(make_run(tenant))
    with pytest.raises(GrantMismatch) as digest_error:
        approval_decide(
            action=action,
            approver=operator,
            decision="approve",
            seen_digest="sha256:" + "0" * 64,
            seen_state_version=action.base_version,
        )
    with pytest.raises(GrantMismatch) as version_error:
        approval_decide(
            action=action,
            approver=operator,
            decision="approve",
            seen_digest=action.intent_digest,
            seen_state_version=action.base_version - 1,
        )
    assert (digest_error.value.rule, version_error.value.rule) == ("digest", "state_version")
    assert not Approval.objects.exists()


def test_an_expired_request_cannot_be_approved_and_is_marked_expired():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", approval_seconds=1)
    action = make_action(make_run(tenant))
    time.sleep(1.1)
    with pytest.raises(GrantMismatch) as error:
        approve(action, make_user(tenant, "operator"))
    assert error.value.rule == "expired"
    assert approval_expire(action=action) is True
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.status, action.run.phase) == ("expired", "running")


def test_four_eyes_keeps_the_proposer_from_approving_their_own_intent():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", four_eyes=True)
    proposer = make_user(tenant, "operator")
    action = make_action(make_run(tenant), proposed_by_user=proposer)
    with pytest.raises(NotAllowed, match="four eyes"):
        approve(action, proposer)
    approve(action, make_user(tenant, "operator"))
    assert action.status == "approved"


def test_n_approvals_need_n_distinct_people():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", required_approvals=2)
    first = make_user(tenant, "operator")
    action = make_action(make_run(tenant))
    approve(action, first)
    assert action.status == "waiting_approval"
    with pytest.raises(InvalidTransition, match="already decided"):
        approve(action, first)
    approve(action, make_user(tenant, "operator"))
    assert action.status == "approved"


def test_completion_needs_evidence_of_a_receipt_or_read():
    run = make_run(make_tenant())
    with pytest.raises(MissingEvidence):
        run_complete(run=run, action_ids=[], actor="agent")
    with pytest.raises(MissingEvidence, match="close-ticket"):
        run_complete(run=run, action_ids=["close-ticket"], actor="agent")
    run.refresh_from_db()
    assert run.phase == "running"


def test_cancel_reports_what_was_not_started_and_stops_the_run():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    action.run.refresh_from_db()
    report = run_cancel(run=action.run, reason="customer withdrew", actor="agent")
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert [entry["action_id"] for entry in report["not_started"]] == ["close-ticket"]
    assert (report["done"], report["in_doubt"]) == ([], [])
    assert (action.status, action.run.phase, action.run.stop_reason) == (
        "cancelled",
        "cancelled",
        "customer withdrew",
    )
    with pytest.raises(InvalidTransition, match="already cancelled"):
        run_cancel(run=action.run, reason="again", actor="agent")


def test_a_run_past_its_deadline_stops_as_deadline_exceeded():
    run = make_run(make_tenant(), deadline=timezone.now() + timedelta(seconds=1))
    observation = make_observation(run)
    time.sleep(1.1)
    run.refresh_from_db()
    with pytest.raises(InvalidTransition, match="deadline_exceeded"):
        action_propose(
            run=run,
            action_id="a",
            tool="ticket.close",
            target="ticket-7",
            args={"resolution": "fixed"},
            contract_version="v1",
            observation=observation,
            proposed_by="agent",
        )
    run.refresh_from_db()
    assert (run.phase, run.stop_reason) == ("deadline_exceeded", "deadline passed")


def test_edit_then_approve_supersedes_the_old_intent_with_a_new_key_and_digest():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    action = make_action(make_run(tenant), args={"resolution": "fixed"})
    edited = action_edit_and_approve(
        action=action,
        editor=operator,
        args={"resolution": "duplicate"},
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
    )
    action.refresh_from_db()
    assert (action.status, edited.status, edited.action_id) == (
        "superseded",
        "approved",
        "close-ticket~2",
    )
    assert edited.supersedes_id == action.pk
    assert edited.idempotency_key != action.idempotency_key
    assert edited.intent_digest != action.intent_digest


def test_an_edit_that_changes_nothing_is_refused_and_leaves_the_intent_waiting():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    with pytest.raises(InvalidArguments, match="changes nothing"):
        action_edit_and_approve(
            action=action,
            editor=make_user(tenant, "operator"),
            args=dict(action.args),
            seen_digest=action.intent_digest,
            seen_state_version=action.base_version,
        )
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert Action.objects.count() == 1


def test_asking_again_re_proposes_an_expired_request_under_a_new_key():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", approval_seconds=1)
    operator = make_user(tenant, "operator")
    action = make_action(make_run(tenant))
    time.sleep(1.1)
    approval_expire(action=action)
    action.refresh_from_db()
    again = action_ask_again(action=action, requester=operator)
    assert (again.status, again.action_id, again.args) == (
        "waiting_approval",
        "close-ticket~2",
        action.args,
    )
    assert again.idempotency_key != action.idempotency_key
