"""The worker's grant check: each binding broken alone must refuse.

The grants here are altered in the database on purpose: the check must hold even when a
stored grant is corrupt or tampered with, not only when the services were followed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from control.models import Membership
from runs.exceptions import GrantMismatch
from runs.models import Action, Approval
from runs.record.events import append_event
from runs.services import grant_check
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved_action() -> Action:
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    return action


def test_an_intact_grant_passes(approved_action):
    grant_check(approved_action)


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("intent_digest", "sha256:" + "1" * 64, "digest"),
        ("intent_digest", "", "digest"),
        ("state_version", 1, "state_version"),
        ("target_scope", "ticket-8", "scope"),
        ("target_scope", "", "scope"),
        ("expires_at", timezone.now() - timedelta(seconds=1), "expired"),
        ("decision", "reject", "decision"),
    ],
)
def test_each_broken_binding_refuses(approved_action, field, value, rule):
    Approval.objects.filter(action=approved_action).update(**{field: value})
    with pytest.raises(GrantMismatch) as error:
        grant_check(approved_action)
    assert error.value.rule == rule


def test_an_approver_who_lost_the_operator_role_no_longer_authorises(approved_action):
    approver = approved_action.approvals.get().approver
    Membership.objects.filter(user=approver).delete()
    with pytest.raises(GrantMismatch) as error:
        grant_check(approved_action)
    assert error.value.rule == "role"


def test_a_missing_grant_is_never_approval(approved_action):
    Approval.objects.filter(action=approved_action).delete()
    with pytest.raises(GrantMismatch) as error:
        grant_check(approved_action)
    assert error.value.rule == "approvals"


def test_fewer_grants_than_the_policy_asked_for_refuse(approved_action):
    Action.objects.filter(pk=approved_action.pk).update(required_approvals=2)
    approved_action.refresh_from_db()
    with pytest.raises(GrantMismatch) as error:
        grant_check(approved_action)
    assert error.value.rule == "approvals"


def test_four_eyes_refuses_a_grant_by_the_proposer():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", four_eyes=True)
    proposer, other = make_user(tenant, "operator"), make_user(tenant, "operator")
    action = make_action(make_run(tenant), proposed_by_user=proposer)
    approve(action, other)
    Approval.objects.filter(action=action).update(approver=proposer)
    with pytest.raises(GrantMismatch) as error:
        grant_check(action)
    assert error.value.rule == "four_eyes"


def test_any_other_change_of_the_run_after_the_grant_refuses(approved_action):
    run = approved_action.run
    run.refresh_from_db()
    append_event(run, type="plan.revised", actor="agent", changes={"plan": {"summary": "new"}})
    with pytest.raises(GrantMismatch) as error:
        grant_check(approved_action)
    assert error.value.rule == "state_version"
