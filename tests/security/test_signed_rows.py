"""Issue 27: the rows that decide approval (tool policies, standing rules, memberships) are
signed with the checkpoint keys, and a row written around the services decides nothing in
its own favour. A database writer without the keys cannot get an unapproved write executed.
"""

from __future__ import annotations

import importlib
import json
import uuid
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from control.models import AuditEntry, Membership
from runs.exceptions import NotAllowed
from runs.models import Action, OutboxMessage, RunEvent, StandingGrant, ToolPolicy
from runs.notify.recipients import escalation_contacts
from runs.record.outbox import EXECUTE_JOB
from runs.selectors import policy_for
from runs.services import (
    PlanItem,
    approval_escalate,
    link_only_allowed,
    plan_propose,
    standing_grant_approve,
    standing_grant_propose,
)
from tests import factories
from tests.api.conftest import ApiClient, make_token
from tests.api.support import content_hash
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db

REFUND = "payment.refund"
CHARGE_ID = "ch_" + "a" * 32
OLD_KEY, NEW_KEY = b"o" * 32, b"n" * 32


def _sql(statement: str, params: list) -> None:
    """What a database writer does: no service, no signature."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _insert_policy(
    tenant, tool: str, *, needs_approval: bool, escalate_to: str = "", link_only: bool = False
) -> None:
    _sql(
        "INSERT INTO runs_toolpolicy (tenant_id, tool, needs_approval, four_eyes, "
        "required_approvals, approval_seconds, standing_grants_allowed, escalation_seconds, "
        "escalation_contacts, link_only_decisions, key_id, mac) "
        "VALUES (%s, %s, %s, false, 1, 86400, true, %s, %s, %s, '', '')",
        [
            str(tenant.pk),
            tool,
            needs_approval,
            1 if escalate_to else None,
            json.dumps([escalate_to] if escalate_to else []),
            link_only,
        ],
    )


def _insert_membership(tenant, user, role: str) -> None:
    _sql(
        "INSERT INTO control_membership (tenant_id, user_id, role, created_at, key_id, mac) "
        "VALUES (%s, %s, %s, %s, '', '')",
        [str(tenant.pk), user.pk, role, timezone.now()],
    )


def _verify_audit_refusal(capsys) -> tuple[str, str]:
    with pytest.raises(CommandError) as refused:
        call_command("verify_audit")
    return str(refused.value), capsys.readouterr().err


def _propose_charge_through_the_api(tenant) -> dict:
    agent = ApiClient(make_token(tenant), tenant)
    run = agent.post("/runs", {"goal": "charge cus_42 for the order"}).body
    observation = agent.post(
        f"/runs/{run['id']}/observations",
        {
            "source": "orders",
            "ref": "order-9",
            "content_hash": content_hash("order-9"),
            "summary": "the order is confirmed",
        },
    ).body
    answer = agent.post(
        f"/runs/{run['id']}/actions",
        {
            "action_id": "charge-order-9",
            "tool": "payment.charge",
            "target": "cus_42",
            "args": {"amount_cents": 5000, "currency": "usd"},
            "contract_version": "v1",
            "observation_id": observation["id"],
        },
    )
    assert answer.status == 201, answer.body
    return answer.body


def _refund_rule(tenant, proposer, name: str, **limits) -> StandingGrant:
    """A standing rule for refunds, proposed through the service (and so signed)."""
    expires_at = timezone.now() + timedelta(days=7)
    return standing_grant_propose(
        tenant=tenant, tool=REFUND, name=name, proposer=proposer, expires_at=expires_at, **limits
    )


def _executes(action: Action) -> bool:
    return OutboxMessage.objects.filter(action=action, job=EXECUTE_JOB).exists()


def test_a_policy_inserted_by_sql_that_waives_approval_leaves_the_charge_waiting(capsys):
    """The reproduction of issue 27: one INSERT used to let the next charge run unapproved."""
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    _insert_policy(tenant, "payment.charge", needs_approval=False)

    proposed = _propose_charge_through_the_api(tenant)

    assert proposed["status"] == "waiting_approval"
    action = Action.objects.get(pk=proposed["id"])
    assert (action.needs_approval, action.four_eyes) == (True, True)
    assert not _executes(action)
    event = RunEvent.objects.get(run=action.run, type="action.proposed")
    assert event.payload["unverified_policy"] == "unsigned"
    distrust = AuditEntry.objects.get(verb="tool_policy.unverified")
    assert distrust.object_id == "payment.charge"
    assert "does not verify (unsigned)" in distrust.reason
    # verify_audit names the row; verify_run names the run's intent decided under it.
    message, named = _verify_audit_refusal(capsys)
    assert "1 row(s) that decide approval do not verify (tool_policy)" in message
    assert "payment.charge policy" in named
    assert "unsigned" in named
    with pytest.raises(CommandError, match=r"was proposed while the payment\.charge policy"):
        call_command("verify_run", str(action.run_id))
    # The operator's run page flags the proposal.
    browser = Client()
    browser.force_login(operator)
    page = browser.get(f"/runs/{action.run_id}/").content.decode()
    assert "Proposed while its tool's policy row did not verify" in page
    # The strictest reading still lets a person decide: the charge goes out once approved.
    approve(action, operator)
    assert action.status == "approved"
    assert _executes(action)


def test_a_signed_policy_changed_by_sql_update_is_read_as_the_strictest(capsys):
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", needs_approval=True, required_approvals=2)
    _sql(
        "UPDATE runs_toolpolicy SET needs_approval = false, required_approvals = 1 "
        "WHERE tenant_id = %s",
        [str(tenant.pk)],
    )

    policy = policy_for(tenant=tenant, tool="ticket.close")
    assert (policy.needs_approval, policy.four_eyes, policy.problem) == (True, True, "bad_mac")
    assert policy.standing_grants_allowed is False
    action = make_action(make_run(tenant))
    assert action.status == "waiting_approval"
    assert not _executes(action)
    _, named = _verify_audit_refusal(capsys)
    assert "bad_mac" in named
    # Saving the policy again through the service signs it again: it decides once more.
    make_policy(tenant, "ticket.close", needs_approval=False)
    call_command("verify_audit")
    assert make_action(make_run(tenant), action_id="close-2").status == "approved"


def test_a_standing_rule_inserted_by_sql_never_approves(capsys):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    rule_id = uuid.uuid4()
    now = timezone.now()
    _sql(
        "INSERT INTO runs_standinggrant (id, tenant_id, tool, name, target_pattern, arg_bounds, "
        "amount_argument, expires_at, status, required_approvals, four_eyes, created_by_id, "
        "uses, amount_used, revoke_reason, created_at, key_id, mac) "
        "VALUES (%s, %s, %s, 'any refund', '', '{}', '', %s, 'active', 1, false, %s, 0, 0, "
        "'', %s, '', '')",
        [str(rule_id), str(tenant.pk), REFUND, now + timedelta(days=7), operator.pk, now],
    )
    _sql(
        "INSERT INTO runs_standinggrantapproval (grant_id, approver_id, created_at) "
        "VALUES (%s, %s, %s)",
        [str(rule_id), operator.pk, now],
    )

    refund = make_action(
        make_run(tenant), tool=REFUND, target=CHARGE_ID, args={"amount_cents": 100}
    )

    assert refund.status == "waiting_approval"
    assert not refund.approvals.exists()
    _, named = _verify_audit_refusal(capsys)
    assert f"standing_grant {rule_id}" in named
    assert "unsigned" in named


def test_a_signed_rule_whose_use_counter_is_reset_by_sql_stops_approving(capsys):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    rule = _refund_rule(tenant, operator, "one refund", max_uses=1)
    first = make_action(make_run(tenant), tool=REFUND, target=CHARGE_ID, args={"amount_cents": 1})
    assert first.status == "approved"  # the rule's one use, signed with its counter
    call_command("verify_audit")
    _sql("UPDATE runs_standinggrant SET uses = 0 WHERE id = %s", [str(rule.pk)])

    second = make_action(make_run(tenant), tool=REFUND, target=CHARGE_ID, args={"amount_cents": 1})

    assert second.status == "waiting_approval"
    with pytest.raises(CommandError, match=r"standing rule .one refund.*does not verify: bad_mac"):
        call_command("verify_run", str(first.run_id))


def test_a_proposed_rule_inserted_by_sql_cannot_be_approved_into_force():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    rule = _refund_rule(tenant, operator, "refunds")
    StandingGrant.objects.filter(pk=rule.pk).update(status="proposed", max_uses=None)
    with pytest.raises(NotAllowed, match="does not verify"):
        standing_grant_approve(rule=rule, approver=make_user(tenant, "operator"))


def test_a_membership_inserted_by_sql_grants_no_access_to_the_inbox(capsys):
    tenant = make_tenant()
    waiting = make_action(make_run(tenant))
    intruder = get_user_model().objects.create_user("mallory", password="a-long-test-password")
    _insert_membership(tenant, intruder, "operator")
    browser = Client()
    browser.force_login(intruder)

    answer = browser.get("/inbox/")

    assert answer.status_code == 403
    assert b"does not verify (unsigned)" in answer.content
    denied = AuditEntry.objects.get(verb="auth.denied")
    assert "the operator membership in" in denied.reason
    assert "(unsigned)" in denied.reason
    with pytest.raises(NotAllowed):
        approve(waiting, intruder)
    assert waiting.status == "waiting_approval"
    _, named = _verify_audit_refusal(capsys)
    assert "membership" in named
    assert "mallory operator in" in named


def test_a_signed_membership_given_another_role_by_sql_grants_none(capsys):
    tenant = make_tenant()
    auditor = make_user(tenant, "auditor", username="aude")
    Membership.objects.filter(user=auditor).update(role="operator")
    browser = Client()
    browser.force_login(auditor)
    assert browser.get("/inbox/").status_code == 403
    assert "bad_mac" in _verify_audit_refusal(capsys)[1]


def test_rows_written_through_the_services_keep_working():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    make_policy(tenant, "notify.send", needs_approval=False)
    _refund_rule(tenant, operator, "small refunds", arg_bounds={"amount_cents": {"maximum": 5000}})
    run = make_run(tenant)
    sent = make_action(run, tool="notify.send", target="ops@example.com", args={"body": "hi"})
    assert sent.status == "approved"
    assert _executes(sent)
    refund = make_action(
        make_run(tenant), tool=REFUND, target=CHARGE_ID, args={"amount_cents": 4999}
    )
    assert refund.status == "approved"
    browser = Client()
    browser.force_login(operator)
    assert browser.get("/inbox/").status_code == 200
    call_command("verify_audit")
    call_command("verify_run", str(run.pk))


def test_rows_signed_with_a_key_still_configured_verify_after_rotation(settings, capsys):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"old": OLD_KEY}
    tenant = make_tenant()
    operator = make_user(tenant, "operator", username="olga")
    make_policy(tenant, "notify.send", needs_approval=False)

    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": NEW_KEY, "old": OLD_KEY}
    assert policy_for(tenant=tenant, tool="notify.send").needs_approval is False
    make_policy(tenant, "ticket.close", needs_approval=False)
    assert ToolPolicy.objects.get(tool="ticket.close").key_id == "new"
    assert Membership.objects.get(user=operator).key_id == "old"
    call_command("verify_audit")
    browser = Client()
    browser.force_login(operator)
    assert browser.get("/inbox/").status_code == 200

    # Once the old key is gone, what it signed decides nothing; what the new one signed does.
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": NEW_KEY}
    assert policy_for(tenant=tenant, tool="notify.send").problem == "unknown_key"
    assert policy_for(tenant=tenant, tool="ticket.close").needs_approval is False
    assert browser.get("/inbox/").status_code == 403


def test_rotation_re_signs_rows_that_verify_before_the_old_key_is_retired(settings, capsys):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"old": OLD_KEY}
    tenant = make_tenant()
    operator = make_user(tenant, "operator", username="olga")
    make_policy(tenant, "notify.send", needs_approval=False)
    _insert_policy(tenant, "ticket.close", needs_approval=False)
    ToolPolicy.objects.filter(tool="ticket.close").update(key_id="old", mac="0" * 64)
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": NEW_KEY, "old": OLD_KEY}

    with pytest.raises(CommandError, match="resign-rows --id old"):
        call_command("checkpoint_keys", "retire", "--id", "old")
    # The forged row is not vouched for by the rotation; the genuine ones move to the new key.
    with pytest.raises(CommandError, match=r"1 row.s. signed with 'old' do not verify"):
        call_command("checkpoint_keys", "resign-rows", "--id", "old")
    assert "ticket.close policy" in capsys.readouterr().err
    assert Membership.objects.get(user=operator).key_id == "new"
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": NEW_KEY}
    assert policy_for(tenant=tenant, tool="notify.send").needs_approval is False
    assert policy_for(tenant=tenant, tool="ticket.close").needs_approval is True


def test_the_upgrade_migration_signs_existing_rows_as_the_live_code_verifies_them():
    """runs/0018 copies the signing code; its MACs must be the ones the live code checks."""
    sign_existing = importlib.import_module("runs.migrations.0021_sign_existing_rows")
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    make_policy(
        tenant,
        "notify.send",
        needs_approval=False,
        escalation_seconds=60,
        escalation_contacts=["ops@example.com"],
    )
    _refund_rule(
        tenant,
        operator,
        "capped refunds",
        arg_bounds={"amount_cents": {"maximum": 5000.5}},
        amount_argument="amount_cents",
        amount_cap=Decimal("120.50"),
    )
    for model in (ToolPolicy, StandingGrant, Membership):
        model.objects.update(key_id="", mac="")
    assert policy_for(tenant=tenant, tool="notify.send").problem == "unsigned"

    sign_existing.sign_existing(django_apps, SimpleNamespace(connection=connection))

    call_command("verify_audit")
    assert policy_for(tenant=tenant, tool="notify.send").needs_approval is False


def test_a_plan_under_a_forged_policy_needs_four_eyes_and_verify_run_names_it():
    tenant = make_tenant()
    _insert_policy(tenant, "notify.send", needs_approval=False)
    run = make_run(tenant)
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                action_id="notify-1",
                tool="notify.send",
                target="a@example.com",
                args={"body": "done"},
            )
        ],
        observation=factories.make_observation(run),
        proposed_by="agent-token",
    )
    assert (plan.status, plan.four_eyes) == ("waiting_approval", True)
    event = RunEvent.objects.get(run=run, type="plan.proposed")
    assert event.payload["unverified_policies"] == {"notify.send": "unsigned"}
    with pytest.raises(CommandError, match=r"plan .* was proposed while the notify\.send policy"):
        call_command("verify_run", str(run.pk))


def test_a_forged_policy_neither_escalates_to_its_contacts_nor_lets_a_link_decide():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    _insert_policy(
        tenant,
        "ticket.close",
        needs_approval=True,
        escalate_to="mallory@example.net",
        link_only=True,
    )
    Action.objects.filter(pk=action.pk).update(created_at=timezone.now() - timedelta(hours=1))
    action.refresh_from_db()

    assert link_only_allowed(action) is False
    assert approval_escalate(action=action) is False
    assert escalation_contacts(action) == []
    # The same policy saved by an admin does both.
    make_policy(
        tenant,
        "ticket.close",
        escalation_seconds=1,
        escalation_contacts=["lead@example.com"],
        link_only_decisions=True,
    )
    assert link_only_allowed(action) is True
    assert escalation_contacts(action) == ["lead@example.com"]
