"""Decision links for a plan: the "approval requested" mail of a plan is about the plan, and
its link decides the whole plan, exactly the version the mail named, once, as the inbox's
plan decision does. A GET decides nothing; every refusal changes nothing."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from control.models import AuditEntry
from runs.models import Approval, DecisionLinkUse, Plan
from runs.models.notify_kinds import REQUESTED
from runs.notifications import approval_notify
from runs.services import PlanItem, plan_propose, plan_revise
from tests.factories import make_observation, make_run, make_user
from tests.pages.conftest import client_for
from tests.pages.test_decision_links import LINK, with_email
from tests.pages.test_decision_links import allow_link_only as allow_tool_link_only
from tests.pages.test_plan_inbox import binding, refunds_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def olivia(tenant):
    return with_email(make_user(tenant, "operator", username="olivia"), "olivia@example.com")


@pytest.fixture
def plan(tenant):
    return refunds_plan(tenant, 3)


def plan_mail(plan: Plan, user, mailoutbox):
    """The "approval requested" mail `user` got for the plan (sent for its first item)."""
    mailoutbox.clear()
    approval_notify(action=str(plan.items.get(position=0).pk), kind=REQUESTED)
    (mail,) = [mail for mail in mailoutbox if mail.to == [user.email]]
    return mail


def link_for(plan: Plan, user, mailoutbox) -> str:
    return urlsplit(LINK.search(plan_mail(plan, user, mailoutbox).body).group(0)).path


def undecided(plan: Plan) -> bool:
    plan.refresh_from_db()
    return (
        plan.status == "waiting_approval"
        and not Approval.objects.filter(action__plan=plan).exists()
        and set(plan.items.values_list("status", flat=True)) == {"waiting_approval"}
        and not DecisionLinkUse.objects.exists()
    )


def allow_link_only(tenant, allowed: bool = True) -> None:
    allow_tool_link_only(tenant, allowed, tool="payment.refund")


def approve_form(plan: Plan) -> dict:
    return {"decision": "approve", **binding(plan)}


def test_the_mail_of_a_plan_is_about_the_plan_and_names_its_digest(olivia, plan, mailoutbox):
    mail = plan_mail(plan, olivia, mailoutbox)

    assert mail.subject == "Approval requested: plan of 3: payment.refund"
    assert "Plan:     3 writes, approved or rejected as one" in mail.body
    assert f"Digest:   {plan.digest} (plan, state version {plan.base_version})" in mail.body
    assert LINK.search(mail.body)


def test_opening_a_plan_link_shows_the_plan_and_decides_nothing(
    client, olivia, plan, mailoutbox, django_assert_num_queries
):
    path = link_for(plan, olivia, mailoutbox)

    # the plan (its summary on its row), its first items, the action and its approvals, the
    # person, "used?", the plan's tools and their policies
    with django_assert_num_queries(8):
        response = client.get(path)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Decide on this plan" in page
    assert "Plan of <strong>3</strong> intents" in page
    assert 'data-total="amount_cents">303<' in page
    assert plan.digest in page
    assert page.count("<tr><td>") == 3
    assert "Sign in to decide" in page
    assert undecided(plan)


def test_the_approver_confirms_and_every_intent_of_the_plan_is_approved_once(
    client, olivia, plan, mailoutbox
):
    path = link_for(plan, olivia, mailoutbox)
    client_for(client, olivia)

    response = client.post(path, approve_form(plan))

    assert response.status_code == 200
    assert "Approved all 3." in response.content.decode()
    plan.refresh_from_db()
    assert plan.status == "approved"
    assert set(plan.items.values_list("status", flat=True)) == {"approved"}
    assert set(Approval.objects.values_list("plan_digest", "approver")) == {
        (plan.digest, olivia.pk)
    }
    use = DecisionLinkUse.objects.get()
    assert (use.action.plan_id, use.decision, use.logged_in) == (plan.pk, "approve", True)
    entry = AuditEntry.objects.get(verb="plan.decided_by_link")
    assert (entry.actor, entry.object_id) == ("olivia", str(plan.pk))

    again = client.post(path, approve_form(plan))
    assert again.status_code == 410
    assert Approval.objects.count() == 3


def test_rejecting_through_the_link_rejects_the_plan_with_its_reason(
    client, olivia, plan, mailoutbox
):
    path = link_for(plan, olivia, mailoutbox)
    client_for(client, olivia)

    response = client.post(
        path, {"decision": "reject", "preset": "Wrong target", "reason": "", **binding(plan)}
    )

    assert response.status_code == 200
    plan.refresh_from_db()
    assert (plan.status, plan.decision_reason) == ("rejected", "Wrong target")
    assert set(plan.items.values_list("status", flat=True)) == {"rejected"}


def test_a_link_to_a_revised_plan_is_refused(client, olivia, plan, mailoutbox):
    path = link_for(plan, olivia, mailoutbox)
    revised = plan_revise(
        plan=plan,
        editor=olivia,
        drop=[str(plan.items.get(position=2).pk)],
        reason="refund 2 was paid by hand",
        **binding(plan),
    )
    client_for(client, olivia)

    for response in (client.get(path), client.post(path, approve_form(plan))):
        assert response.status_code == 409
        assert "This plan was revised" in response.content.decode()
    revised.refresh_from_db()
    assert revised.status == "waiting_approval"
    assert not Approval.objects.exists()
    assert not DecisionLinkUse.objects.exists()


def test_a_stale_binding_is_refused_and_leaves_the_link_usable(client, olivia, plan, mailoutbox):
    path = link_for(plan, olivia, mailoutbox)
    client_for(client, olivia)

    stale = {**approve_form(plan), "seen_state_version": plan.base_version - 1}
    response = client.post(path, stale)

    assert response.status_code == 409
    assert "changed since you looked" in response.content.decode()
    assert undecided(plan)
    assert client.post(path, approve_form(plan)).status_code == 200


def test_a_plan_decides_from_the_link_alone_only_when_every_tool_allows_it(
    client, tenant, olivia, mailoutbox
):
    allow_link_only(tenant)
    plan = refunds_plan(tenant, 2)
    path = link_for(plan, olivia, mailoutbox)
    allow_link_only(tenant, False)
    assert client.post(path, approve_form(plan)).status_code == 302  # to the sign-in page
    assert undecided(plan)

    allow_link_only(tenant)
    assert "Confirm: approve all 2" in client.get(path).content.decode()
    assert client.post(path, approve_form(plan)).status_code == 200
    plan.refresh_from_db()
    assert plan.status == "approved"
    assert DecisionLinkUse.objects.get().logged_in is False


def test_one_tool_that_asks_for_a_session_makes_the_whole_plan_ask(
    client, tenant, olivia, mailoutbox
):
    allow_link_only(tenant)  # payment.refund may be decided from the link; ticket.close not
    run = make_run(tenant)
    items = [
        PlanItem(
            action_id="refund",
            tool="payment.refund",
            target="ch_" + "0" * 32,
            args={"amount_cents": 5},
        ),
        PlanItem(
            action_id="close", tool="ticket.close", target="ticket-1", args={"resolution": "fixed"}
        ),
    ]
    plan, _ = plan_propose(
        run=run, items=items, observation=make_observation(run), proposed_by="agent-token"
    )
    path = link_for(plan, olivia, mailoutbox)

    assert (
        "A tool of this plan has a policy that asks you to sign in"
        in client.get(path).content.decode()
    )
    assert client.post(path, approve_form(plan)).status_code == 302
    assert undecided(plan)
