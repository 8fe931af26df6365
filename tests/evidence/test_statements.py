"""What the decision receipt states where no person decides: a write the system refused, a
request its run's cancellation ended, and the chains those leave verify offline."""

from __future__ import annotations

import json

import pytest
from countersign_client.verify import Broken, verify_bundle
from django.core.management import call_command

from runs.models import Statement
from runs.services import endings, lease_claim, lease_release, protocol, run_cancel
from tests.api.support import make_uncertain_with_case
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db


def _kinds(action) -> list[str]:
    return list(action.statements.order_by("seq").values_list("kind", flat=True))


def test_a_refused_write_and_a_cancelled_request_state_their_endings_and_verify(tmp_path):
    tenant = make_tenant()
    refused = make_action(make_run(tenant), action_id="close-1", target="ticket-1")
    approve(refused, make_user(tenant, "operator"))
    lease = lease_claim(run_id=refused.run_id, owner="test-worker")
    attempt = protocol.attempt_begin(action_pk=refused.pk, lease=lease, worker="test-worker")
    protocol.attempt_failed(
        attempt_pk=attempt.pk,
        lease=lease,
        error_class="invalid_arguments",
        detail="HTTP 422: no such ticket",
        worker="test-worker",
        retry_in=None,
    )
    lease_release(lease=lease)
    waiting = make_action(make_run(tenant), action_id="close-2", target="ticket-2")
    run_cancel(run=waiting.run, reason="the customer withdrew", actor="agent-token")

    assert _kinds(refused) == ["decision", "failed"]
    failed = Statement.objects.get(action=refused, kind="failed").body
    assert (failed["attempts"], failed["error_class"]) == (1, "invalid_arguments")
    assert _kinds(waiting) == ["never_sent"]
    never = Statement.objects.get(action=waiting).body
    assert (never["status"], never["attempts"]) == ("cancelled", 0)
    assert never["detail"] == "the run ended: the customer withdrew"
    call_command("export_evidence", tenant=tenant.name, output=str(tmp_path / "b"), verbosity=0)
    assert verify_bundle(tmp_path / "b").intents == {"failed": 1, "cancelled": 1}


@pytest.mark.parametrize("kind", ["failed", "never_sent"])
def test_an_ending_whose_statement_is_gone_is_named(tmp_path, kind):
    tenant = make_tenant()
    doubtful = make_action(make_run(tenant), action_id="close-1", target="ticket-1")
    approve(doubtful, make_user(tenant, "operator", username="olga"))
    make_uncertain_with_case(doubtful)
    endings.action_abandon(action_pk=doubtful.pk, reason="nobody can tell", actor="rita")
    waiting = make_action(make_run(tenant), action_id="close-2", target="ticket-2")
    run_cancel(run=waiting.run, reason="not needed", actor="agent-token")
    assert _kinds(doubtful) == ["decision", "uncertain", "failed"]
    bundle = tmp_path / "b"
    call_command("export_evidence", tenant=tenant.name, output=str(bundle), verbosity=0)
    lines = (bundle / "statements.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["body"]["kind"] != kind]
    (bundle / "statements.jsonl").write_text("".join(line + "\n" for line in kept))

    with pytest.raises(Broken) as broken:
        verify_bundle(bundle)

    status = {"failed": "failed", "never_sent": "cancelled"}[kind]
    assert broken.value.problem == f"the intent is {status} but no statement says so"


def test_a_write_no_policy_asks_approval_for_says_so_before_its_receipt():
    tenant = make_tenant()
    read = make_action(make_run(tenant), tool="ticket.lookup", action_id="look", args={})

    assert read.needs_approval is False
    [unreviewed] = read.statements.all()
    assert unreviewed.kind == "unreviewed"
    assert unreviewed.body["policy"]["needs_approval"] is False
