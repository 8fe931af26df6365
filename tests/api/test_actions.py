"""Observations, frozen intents, decisions, receipts, completion, cancellation, checkpoints."""

from __future__ import annotations

import json
import re

import pytest

from control.foundation.canonical import intent_digest
from runs.models import Action, Checkpoint, Observation, Run
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from runs.services import approval_decide
from tests.api.conftest import assert_problem
from tests.api.support import content_hash, execute_with_receipt, make_uncertain_with_case
from tests.factories import approve, make_action, make_observation, make_run, make_user, reject

pytestmark = pytest.mark.django_db


def _observe(api, run, summary="customer confirmed the fix") -> dict:
    answer = api.post(
        f"/runs/{run.id}/observations",
        {
            "source": "ticket.lookup",
            "ref": "ticket-7",
            "content_hash": content_hash(summary),
            "summary": summary,
        },
    )
    assert answer.status == 201, answer.body
    return answer.body


def _propose(api, run, observation, **overrides):
    body = {
        "action_id": "close-ticket",
        "tool": "ticket.close",
        "target": "ticket-7",
        "args": {"resolution": "fixed"},
        "contract_version": "v1",
        "observation_id": observation,
    }
    body.update(overrides)
    return api.post(f"/runs/{run.id}/actions", body)


def test_an_observation_is_recorded_and_answered_with_201(api):
    run = make_run(api.tenant)
    body = _observe(api, run)
    observation = Observation.objects.get(pk=body["id"])
    assert (observation.run, observation.source, observation.ref) == (
        run,
        "ticket.lookup",
        "ticket-7",
    )
    assert body["content_hash"] == observation.content_hash


def test_an_observation_with_a_malformed_hash_is_refused(api):
    run = make_run(api.tenant)
    body = {"source": "s", "ref": "r", "content_hash": "md5:abc", "summary": "x"}
    assert_problem(api.post(f"/runs/{run.id}/observations", body), 422, "validation_error")
    assert not Observation.objects.exists()


def test_proposing_freezes_an_intent_with_its_key_digest_and_status(api):
    run = make_run(api.tenant)
    answer = _propose(api, run, _observe(api, run)["id"], target=" TICKET-7 ")
    assert answer.status == 201, answer.body
    body = answer.body
    action = Action.objects.get(pk=body["id"])
    assert body["status"] == "waiting_approval"
    assert body["target"] == "ticket-7"  # normalized before freezing
    assert body["idempotency_key"] == f"{run.id}:close-ticket:ticket-7:v1"
    assert body["intent_digest"] == intent_digest(
        tool="ticket.close", target="ticket-7", args={"resolution": "fixed"}
    )
    assert body["intent_digest"] == action.intent_digest
    assert (body["decision"], body["receipt"], body["reconciliation_case"]) == (None, None, None)


def test_the_same_logical_action_with_the_same_digest_answers_200_with_the_same_intent(api):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    first = _propose(api, run, observation_id)
    again = _propose(api, run, observation_id, target="ticket-7 ")
    assert (first.status, again.status) == (201, 200)
    assert again.body["id"] == first.body["id"]
    assert Action.objects.count() == 1


def test_an_intent_is_found_by_its_logical_id_in_its_run_only(api):
    run = make_run(api.tenant)
    frozen = _propose(api, run, _observe(api, run)["id"]).body
    other_run = make_run(api.tenant)

    found = api.get(f"/runs/{run.id}/actions", action_id="close-ticket")
    unknown = api.get(f"/runs/{run.id}/actions", action_id="close-another")
    elsewhere = api.get(f"/runs/{other_run.id}/actions", action_id="close-ticket")

    assert found.status == 200
    assert [item["id"] for item in found.body["items"]] == [frozen["id"]]
    assert found.body["items"][0]["intent_digest"] == frozen["intent_digest"]
    assert (unknown.body, elsewhere.body) == ({"items": []}, {"items": []})
    assert_problem(api.get(f"/runs/{run.id}/actions"), 422, "validation_error")


def test_the_same_logical_action_with_another_digest_is_a_422_intent_conflict(api):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    assert _propose(api, run, observation_id).status == 201
    answer = _propose(api, run, observation_id, args={"resolution": "wontfix"})
    assert "new action id" in assert_problem(answer, 422, "intent_conflict")["detail"]
    assert Action.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"tool": "ticket.reopen"}, "invalid_arguments"),
        ({"contract_version": "v9"}, "invalid_arguments"),
        ({"args": {"resolution": "fixed", "extra": 1}}, "invalid_arguments"),
        ({"target": "not-a-ticket"}, "invalid_arguments"),
        ({"observation_id": None}, "invalid_arguments"),
        ({"observation_id": "00000000-0000-0000-0000-000000000000"}, "invalid_arguments"),
        ({"action_id": "has:colon"}, "validation_error"),
        ({"action_id": "has space"}, "validation_error"),
    ],
)
def test_an_intent_that_cannot_be_frozen_is_refused_and_nothing_is_written(api, overrides, code):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    assert_problem(_propose(api, run, observation_id, **overrides), 422, code)
    assert not Action.objects.exists()


@pytest.mark.parametrize(
    ("action_id", "rule"),
    [
        ("undo-close-1", "ids starting with 'undo-' are reserved for compensations"),
        ("close-1~2", "ids ending in '~' and digits are reserved for edited and re-asked intents"),
    ],
)
def test_a_proposal_under_a_derived_id_is_refused_naming_the_rule(api, action_id, rule):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    run.refresh_from_db()
    answer = _propose(api, run, observation_id, action_id=action_id)
    problem = assert_problem(answer, 422, "invalid_arguments")
    assert problem["detail"] == f"action_id {action_id!r} is refused: {rule}"
    assert not Action.objects.exists()
    assert Run.objects.get(pk=run.pk).state_version == run.state_version


def test_a_target_with_an_invisible_character_is_refused_not_a_server_error(api):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    answer = _propose(
        api,
        run,
        observation_id,
        tool="notify.send",
        target="ops\u200b@example.com",
        args={"body": "hello"},
    )
    assert_problem(answer, 422, "invalid_arguments")


def test_an_observation_of_another_run_cannot_justify_an_action(api):
    run, other = make_run(api.tenant), make_run(api.tenant)
    answer = _propose(api, run, str(make_observation(other).id))
    assert_problem(answer, 422, "invalid_arguments")


def test_a_second_open_action_on_a_run_is_a_409(api):
    run = make_run(api.tenant)
    observation_id = _observe(api, run)["id"]
    assert _propose(api, run, observation_id).status == 201
    answer = _propose(api, run, observation_id, action_id="other", target="ticket-8")
    assert_problem(answer, 409, "invalid_transition")


def test_an_action_reads_back_with_its_decision_and_the_reject_reason(api):
    run = make_run(api.tenant)
    action = make_action(run)
    operator = make_user(api.tenant, "operator", username="olga")
    reject(action, operator, reason="the customer asked to keep it open")
    body = api.get(f"/actions/{action.id}").body
    assert body["status"] == "rejected"
    decision = body["decision"]
    assert (decision["outcome"], decision["reason"]) == (
        "reject",
        "the customer asked to keep it open",
    )
    (shown,) = decision["approvals"]
    assert shown["decision"] == "reject"
    assert re.fullmatch(r"approver-[0-9a-f]{16}", shown["approver"])


def test_an_approved_action_never_shows_the_approvers_username(api):
    action = make_action(make_run(api.tenant))
    approve(action, make_user(api.tenant, "operator", username="olga.kowalska"))
    answer = api.get(f"/actions/{action.id}")
    assert answer.body["decision"]["outcome"] == "approve"
    assert "olga" not in answer.content.decode().lower()


def test_an_approver_keeps_one_opaque_id_and_two_approvers_have_two(api):
    olga, piet = (make_user(api.tenant, "operator", username=name) for name in ("olga", "piet"))
    first, second, third = (make_action(make_run(api.tenant)) for _ in range(3))
    approve(first, olga)
    approve(second, olga)
    approve(third, piet)
    shown = [
        api.get(f"/actions/{action.id}").body["decision"]["approvals"][0]["approver"]
        for action in (first, second, third)
    ]
    assert shown[0] == shown[1] != shown[2]


def test_a_succeeded_action_shows_its_receipt_and_approval(api, django_assert_num_queries):
    action = make_action(make_run(api.tenant))
    approve(action, make_user(api.tenant, "operator"), reason="confirmed by phone")
    execute_with_receipt(action, receipt_id="rcpt-77")
    # token, last use, the action with its receipt and lineage, approvals, case
    with django_assert_num_queries(5):
        body = api.get(f"/actions/{action.id}").body
    assert body["status"] == "succeeded"
    assert body["decision"]["outcome"] == "approve"
    assert body["decision"]["reason"] == "confirmed by phone"
    receipt = body["receipt"]
    assert (receipt["receipt_id"], receipt["status"], receipt["source"]) == (
        "rcpt-77",
        "closed",
        "response",
    )
    assert receipt["intent_digest"] == action.intent_digest
    assert body["attempt_count"] == 1


@pytest.mark.parametrize(
    ("reason", "detail", "kind", "label"),
    [
        (
            "connection_dropped",
            "the connection dropped after sending",
            "dropped_connection",
            "dropped connection",
        ),
        # An answered 503 of a write that may not be resent: stored as transient, but its
        # outcome is unknown, and the API says so as the case pages do.
        (
            "transient",
            "HTTP 503 service_unavailable: upstream busy",
            "gateway_error",
            "gateway error after send",
        ),
        ("tool_crashed", "RuntimeError: the tool raised", "tool_crashed", "the tool crashed"),
        ("connection_dropped", "the connection closed after sending", "unknown", "outcome unknown"),
    ],
)
def test_an_uncertain_action_links_its_case_named_as_the_pages_name_it(
    api, reason, detail, kind, label
):
    action = make_action(make_run(api.tenant))
    approve(action, make_user(api.tenant, "operator"))
    case = make_uncertain_with_case(action, reason=reason, detail=detail)
    body = api.get(f"/actions/{action.id}").body
    assert body["status"] == "uncertain"
    assert body["error_class"] == reason
    assert body["reconciliation_case"] == {
        "id": str(case.id),
        "status": case.status,
        "reason": reason,
        "reason_kind": kind,
        "reason_label": label,
        "url": f"http://testserver/reconciliation/{case.id}/",
    }


@pytest.mark.parametrize("action_id", ["nope", "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_action_is_a_404_problem(api, action_id):
    assert_problem(api.get(f"/actions/{action_id}"), 404, "not_found")


def test_completing_with_evidence_answers_the_completed_run(api):
    run = make_run(api.tenant)
    action = make_action(run)
    approve(action, make_user(api.tenant, "operator"))
    execute_with_receipt(action, receipt_id="rcpt-9")
    answer = api.post(f"/runs/{run.id}/complete", {"evidence": {"action_ids": ["close-ticket"]}})
    assert answer.status == 200, answer.body
    assert answer.body["phase"] == "completed"
    assert answer.body["evidence"]["receipts"] == {"close-ticket": "rcpt-9"}


@pytest.mark.parametrize("action_ids", [[], ["close-ticket"], ["never-proposed"]])
def test_completing_without_proof_is_a_422_missing_evidence(api, action_ids):
    run = make_run(api.tenant)
    action = make_action(run)
    approval_decide(
        action=action,
        approver=make_user(api.tenant, "operator"),
        decision="reject",
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
    )
    # The run is running again, but a rejected action proves nothing.
    answer = api.post(f"/runs/{run.id}/complete", {"evidence": {"action_ids": action_ids}})
    assert_problem(answer, 422, "missing_evidence")
    run.refresh_from_db()
    assert run.phase == "running"


def test_completing_a_run_that_waits_for_approval_is_a_409_invalid_transition(api):
    run = make_run(api.tenant)
    make_action(run)
    answer = api.post(f"/runs/{run.id}/complete", {"evidence": {"action_ids": ["close-ticket"]}})
    assert_problem(answer, 409, "invalid_transition")


def test_cancelling_reports_effects_done_in_doubt_and_not_started(api):
    run = make_run(api.tenant)
    done = make_action(run, action_id="first", target="ticket-1")
    approve(done, make_user(api.tenant, "operator"))
    execute_with_receipt(done, receipt_id="rcpt-first")
    run.refresh_from_db()
    pending = make_action(run, action_id="second", target="ticket-2")
    answer = api.post(f"/runs/{run.id}/cancel", {"reason": "the customer withdrew"})
    assert answer.status == 200, answer.body
    assert answer.body["run"]["phase"] == "cancelled"
    assert answer.body["run"]["stop_reason"] == "the customer withdrew"
    report = answer.body["report"]
    assert [(e["action_id"], e["receipt_id"]) for e in report["done"]] == [("first", "rcpt-first")]
    assert report["in_doubt"] == []
    assert [e["action_id"] for e in report["not_started"]] == ["second"]
    pending.refresh_from_db()
    assert pending.status == "cancelled"


def test_cancelling_twice_is_a_409(api):
    run = make_run(api.tenant)
    assert api.post(f"/runs/{run.id}/cancel", {"reason": ""}).status == 200
    assert_problem(api.post(f"/runs/{run.id}/cancel", {"reason": ""}), 409, "invalid_transition")


def test_the_checkpoint_is_served_as_verified_and_says_its_mac_is_the_servers(api):
    run = make_run(api.tenant)
    make_action(run)
    answer = api.get(f"/runs/{run.id}/checkpoint")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/json")
    stored = json.loads(latest_checkpoint(run).body)
    assert answer.body == {**stored, "mac_scope": "server_only"}
    assert answer.body["state"]["phase"] == "waiting_approval"


def test_the_checkpoint_shows_agents_opaque_approver_ids_never_user_ids(api):
    run = make_run(api.tenant)
    action = make_action(run)
    approver = make_user(api.tenant, username="alice-approver")
    approve(action, approver)
    stored = checkpoint_verify(latest_checkpoint(run).body)
    assert stored["approval"]["approvers"] == [str(approver.pk)]  # the signed form
    answer = api.get(f"/runs/{run.id}/checkpoint")
    assert answer.status == 200
    (shown,) = answer.body["state"]["approval"]["approvers"]
    assert re.fullmatch(r"approver-[0-9a-f]{16}", shown)
    decision = api.get(f"/actions/{action.id}").body["decision"]
    assert shown == decision["approvals"][0]["approver"]  # the same id the rest of the API shows
    assert "alice-approver" not in answer.content.decode()


def test_a_tampered_checkpoint_is_never_served(api):
    run = make_run(api.tenant, goal="pay 10")
    stored = latest_checkpoint(run)
    # Someone with database access edits the stored envelope.
    Checkpoint.objects.filter(pk=stored.pk).update(body=stored.body.replace("pay 10", "pay 99"))
    problem = assert_problem(api.get(f"/runs/{run.id}/checkpoint"), 500, "checkpoint_invalid")
    assert problem["step"] == "mac"
    assert "pay 99" not in json.dumps(problem)
