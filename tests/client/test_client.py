"""Every client method against a live server: answers, typed errors, Idempotency-Key use."""

from __future__ import annotations

import pytest
import requests
from requests.adapters import HTTPAdapter

from control.models import ApiIdempotencyKey
from runs.models import Action, Run
from tests.client.conftest import LIVE
from tests.factories import make_action, make_run, make_tenant, make_user, reject

from countersign_client import (  # isort: skip
    Countersign,
    IdempotencyKeyReused,
    IntentConflict,
    InvalidArguments,
    MissingEvidence,
    NotFound,
    Unauthorized,
    ValidationFailed,
    WaitTimeout,
    content_hash,
)
from countersign_client.errors import error_for  # isort: skip

pytestmark = LIVE


def _observe(cs: Countersign, run_id: str) -> str:
    return cs.record_observation(
        run_id,
        source="ticket.lookup",
        ref="ticket-7",
        summary="the customer confirmed the fix",
        content_hash=content_hash('{"status": "open"}'),
    )["id"]


def test_runs_are_created_listed_and_read(cs, tenant):
    run = cs.create_run("close ticket-7", budget=3, plan={"steps": 2}, versions={"model": "m"})
    assert (run["phase"], run["budget"], run["plan"]) == (
        "running",
        {"limit": 3, "used": 0},
        {"steps": 2},
    )
    assert cs.get_run(run["id"])["state_version"] == run["state_version"]
    for number in range(4):
        cs.create_run(f"goal {number}")
    page = cs.list_runs(limit=2)
    assert (page["count"], len(page["items"])) == (5, 2)
    assert [r["goal"] for r in cs.iter_runs(page_size=2)] == [
        "goal 3",
        "goal 2",
        "goal 1",
        "goal 0",
        "close ticket-7",
    ]
    assert cs.list_runs(phase="completed")["count"] == 0


def test_each_logical_post_sends_its_own_fresh_idempotency_key(cs, tenant):
    cs.create_run("one")
    cs.create_run("one")
    keys = list(ApiIdempotencyKey.objects.values_list("key", flat=True))
    assert len(keys) == len(set(keys)) == 2
    assert Run.objects.count() == 2


def test_tools_name_their_versions_and_argument_schemas(cs, tenant):
    tools = {tool["name"]: tool for tool in cs.list_tools()}
    assert tools["ticket.close"]["needs_approval"] is True
    assert "resolution" in tools["ticket.close"]["args_schema"]["properties"]


def test_an_intent_is_proposed_once_and_conflicts_are_typed(cs, tenant):
    run = cs.create_run("close ticket-7")
    observation_id = _observe(cs, run["id"])
    proposal = {
        "action_id": "close-7",
        "tool": "ticket.close",
        "target": "ticket-7",
        "args": {"resolution": "fixed"},
        "observation_id": observation_id,
    }
    first = cs.propose_action(run["id"], **proposal)
    again = cs.propose_action(run["id"], **proposal)
    assert first["id"] == again["id"]
    assert first["status"] == "waiting_approval"
    assert first["intent_digest"].startswith("sha256:")
    with pytest.raises(IntentConflict) as conflict:
        cs.propose_action(run["id"], **{**proposal, "args": {"resolution": "wontfix"}})
    assert conflict.value.status == 422
    assert conflict.value.code == "intent_conflict"
    with pytest.raises(InvalidArguments):
        cs.propose_action(run["id"], **{**proposal, "action_id": "x", "tool": "ticket.reopen"})
    assert Action.objects.count() == 1


def test_waiting_for_an_undecided_action_times_out_with_its_last_state(cs, tenant):
    action = make_action(make_run(tenant))
    with pytest.raises(WaitTimeout) as timeout:
        cs.wait_for(str(action.id), timeout=0.6)
    assert timeout.value.action["status"] == "waiting_approval"
    assert isinstance(timeout.value, TimeoutError)


def test_cancel_reports_effects_and_completion_needs_evidence(cs, tenant):
    run = make_run(tenant)
    make_action(run)
    with pytest.raises(MissingEvidence):
        cs.complete_run(str(make_run(tenant).id), action_ids=[])
    report = cs.cancel_run(str(run.id), reason="customer withdrew")
    assert report["run"]["phase"] == "cancelled"
    assert [effect["action_id"] for effect in report["report"]["not_started"]] == ["close-ticket"]


def test_the_checkpoint_comes_back_as_the_envelope_the_server_verified(cs, tenant):
    run = make_run(tenant)
    envelope = cs.get_checkpoint(str(run.id))
    # The MAC is the server's own (approvers are shown to agents as opaque ids).
    assert set(envelope) == {"schema_version", "key_id", "mac", "mac_scope", "state"}
    assert envelope["mac_scope"] == "server_only"
    assert envelope["state"]["run_id"] == str(run.id)


def test_problems_become_typed_exceptions(cs, live_server, tenant):
    with pytest.raises(NotFound) as missing:
        cs.get_run("00000000-0000-0000-0000-000000000000")
    assert missing.value.type == "urn:countersign:problem:not_found"
    with pytest.raises(ValidationFailed) as invalid:
        cs.create_run("")
    assert invalid.value.problem["errors"][0]["loc"] == ["body", "payload", "goal"]
    with pytest.raises(Unauthorized):
        Countersign(live_server.url, "cs_wrong", retries=0).list_tools()


def test_the_other_tenants_runs_are_not_found(cs, tenant):
    foreign = make_run(make_tenant())
    with pytest.raises(NotFound):
        cs.get_run(str(foreign.id))


class _DropFirstAnswer(HTTPAdapter):
    """The network boundary: the first POST reaches the server, its answer is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request, *args, **kwargs):
        response = super().send(request, *args, **kwargs)
        self.sent.append(request)
        if request.method == "POST" and len(self.sent) == 1:
            raise requests.ConnectionError("connection reset after the request was sent")
        return response


def test_a_retry_after_a_lost_answer_reuses_the_key_and_gets_the_first_answer(
    live_server, token, tenant
):
    adapter = _DropFirstAnswer()
    session = requests.Session()
    session.mount("http://", adapter)
    cs = Countersign(live_server.url, token, session=session, backoff=0.01)
    run = cs.create_run("exactly once over a flaky network")
    assert Run.objects.count() == 1
    assert run["id"] == str(Run.objects.get().id)
    first, retry = adapter.sent
    assert first.headers["Idempotency-Key"] == retry.headers["Idempotency-Key"]
    assert first.body == retry.body


def test_a_reused_key_with_another_body_maps_to_its_typed_error(live_server, token, tenant):
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "fixed"}
    url = live_server.url + "/api/v1/runs"
    assert requests.post(url, json={"goal": "a"}, headers=headers, timeout=10).status_code == 201
    answer = requests.post(url, json={"goal": "b"}, headers=headers, timeout=10)
    error = error_for(answer.status_code, answer.json())
    assert isinstance(error, IdempotencyKeyReused)
    assert (error.status, error.code) == (422, "idempotency_key_reused")


def test_an_operator_decision_reaches_wait_for(cs, tenant):
    action = make_action(make_run(tenant))
    reject(action, make_user(tenant, "operator"), reason="not this one")
    decided = cs.wait_for(str(action.id), timeout=5)
    assert (decided["status"], decided["decision"]["reason"]) == ("rejected", "not this one")
