"""Decision links from the "approval requested" mail: a GET shows and never decides; a POST
decides once, as the link's approver, bound to what the page showed. Every refusal has a
page and a status of its own and changes nothing."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from control.models import AuditEntry
from runs.models import Action, Approval, DecisionLinkUse, Statement
from runs.models.notify_kinds import REQUESTED
from runs.notifications import approval_notify
from runs.services import action_edit_and_approve, tool_policy_set
from tests.factories import make_user
from tests.pages.conftest import binding, client_for, make_waiting

pytestmark = pytest.mark.django_db
LINK = re.compile(r"^https?://\S+/decide/\S+/$", re.MULTILINE)


def with_email(user, address: str):
    user.email = address
    user.save(update_fields=["email"])
    return user


def link_for(action: Action, user, mailoutbox) -> str:
    """The path of the decision link the request's mail gave `user`."""
    mailoutbox.clear()
    approval_notify(action=str(action.pk), kind=REQUESTED)
    (mail,) = [mail for mail in mailoutbox if mail.to == [user.email]]
    return urlsplit(LINK.search(mail.body).group(0)).path


def allow_link_only(tenant, allowed: bool = True, *, tool: str = "ticket.close") -> None:
    tool_policy_set(
        tenant=tenant,
        tool=tool,
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=3600,
        link_only_decisions=allowed,
        actor="tests",
    )


@pytest.fixture
def olivia(tenant):
    return with_email(make_user(tenant, "operator", username="olivia"), "olivia@example.com")


@pytest.fixture
def action(tenant):
    return make_waiting(tenant)


def unchanged(action: Action) -> bool:
    action.refresh_from_db()
    return (
        action.status == "waiting_approval"
        and not Approval.objects.filter(action=action).exists()
        and not DecisionLinkUse.objects.filter(action=action).exists()
    )


def approve_form(action: Action) -> dict:
    return {"decision": "approve", **binding(action)}


def test_opening_a_link_shows_the_frozen_intent_and_decides_nothing(
    client, olivia, action, mailoutbox, django_assert_num_queries
):
    path = link_for(action, olivia, mailoutbox)

    with django_assert_num_queries(5):  # action, its approvals, person, used?, tool policy
        response = client.get(path)

    assert response.status_code == 200
    page = response.content.decode()
    for shown in (
        action.tool,
        action.target,
        action.intent_digest,
        action.run.goal,
        action.observation.summary,
        "&quot;resolution&quot;: &quot;fixed&quot;",
        "Sign in to decide",
    ):
        assert shown in page
    assert unchanged(action)


def test_the_approver_signed_in_confirms_and_the_action_is_approved_once(
    client, olivia, action, mailoutbox
):
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)

    response = client.post(path, approve_form(action))

    assert response.status_code == 200
    assert "Approved." in response.content.decode()
    action.refresh_from_db()
    assert action.status == "approved"
    approval = Approval.objects.get(action=action)
    assert (approval.approver, approval.intent_digest) == (olivia, action.intent_digest)
    use = DecisionLinkUse.objects.get(action=action)
    assert (use.approver, use.decision, use.logged_in) == (olivia, "approve", True)
    assert AuditEntry.objects.filter(verb="action.decided_by_link", actor="olivia").exists()
    receipt = Statement.objects.get(action=action, kind="decision").body
    assert receipt["decider"] == {
        "kind": "person",
        "name": "olivia",
        "authenticated": "decision_link+session",
    }

    again = client.post(path, approve_form(action))
    assert again.status_code == 410
    assert "This link was already used" in again.content.decode()
    assert client.get(path).status_code == 410
    assert Approval.objects.filter(action=action).count() == 1


def test_a_rejection_through_the_link_carries_its_reason(client, olivia, action, mailoutbox):
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)

    response = client.post(
        path, {"decision": "reject", "preset": "Wrong target", "reason": "", **binding(action)}
    )

    assert response.status_code == 200
    action.refresh_from_db()
    assert (action.status, action.decision_reason) == ("rejected", "Wrong target")


def test_without_a_session_the_link_asks_to_sign_in_and_decides_nothing(
    client, olivia, action, mailoutbox
):
    path = link_for(action, olivia, mailoutbox)

    response = client.post(path, approve_form(action))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert unchanged(action)


def test_link_only_tools_decide_without_a_session(client, tenant, olivia, mailoutbox):
    allow_link_only(tenant)
    action = make_waiting(tenant)
    path = link_for(action, olivia, mailoutbox)

    page = client.get(path).content.decode()
    assert "Confirm: approve this write" in page
    shown = re.search(r'name="seen_view" value="([^"]+)"', page).group(1)
    response = client.post(path, {**approve_form(action), "seen_view": shown})

    assert response.status_code == 200
    action.refresh_from_db()
    assert action.status == "approved"
    assert DecisionLinkUse.objects.get(action=action).logged_in is False
    receipt = Statement.objects.get(action=action, kind="decision").body
    assert receipt["decider"]["authenticated"] == "decision_link"
    # The page's form carried the digest of the view it showed, which the receipt signs.
    assert receipt["view_seen"] == receipt["view_digest"] == shown


def test_turning_link_only_off_stops_links_already_sent(client, tenant, olivia, mailoutbox):
    allow_link_only(tenant)
    action = make_waiting(tenant)
    path = link_for(action, olivia, mailoutbox)
    allow_link_only(tenant, allowed=False)

    assert client.post(path, approve_form(action)).status_code == 302
    assert unchanged(action)


def test_a_link_opened_by_someone_else_signed_in_is_refused(
    client, tenant, olivia, action, mailoutbox
):
    allow_link_only(tenant)  # even where the link alone would do
    path = link_for(action, olivia, mailoutbox)
    client_for(client, make_user(tenant, "operator", username="mallory"))

    for response in (client.get(path), client.post(path, approve_form(action))):
        assert response.status_code == 403
        page = response.content.decode()
        assert "This link was sent to someone else" in page
        assert "You are signed in as mallory" in page
    assert unchanged(action)
    denials = AuditEntry.objects.filter(verb="auth.denied", actor="mallory")
    assert denials.count() == 2
    assert not any(path.split("/")[2] in str(entry.data) for entry in denials)


def test_an_expired_link_is_refused(client, olivia, action, mailoutbox):
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)

    with time_machine.travel(timezone.now() + timedelta(minutes=31)):
        for response in (client.get(path), client.post(path, approve_form(action))):
            assert response.status_code == 410
            assert "This link has expired" in response.content.decode()
    assert unchanged(action)


def test_the_link_lifetime_is_a_setting(client, settings, olivia, action, mailoutbox):
    settings.COUNTERSIGN_DECISION_LINK_SECONDS = 60
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)

    with time_machine.travel(timezone.now() + timedelta(seconds=50)):
        assert client.get(path).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(seconds=70)):
        assert client.get(path).status_code == 410


def test_a_link_lives_no_longer_than_its_request(client, tenant, olivia, mailoutbox):
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=120,
        actor="tests",
    )
    action = make_waiting(tenant)
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)

    with time_machine.travel(timezone.now() + timedelta(minutes=3)):
        response = client.get(path)
    assert response.status_code == 410
    assert "This link has expired" in response.content.decode()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda token: token.replace(token[5], "A" if token[5] != "A" else "B", 1),
        lambda token: token[:-3],
        lambda token: "not-a-token",
    ],
)
def test_a_tampered_link_is_refused(client, olivia, action, mailoutbox, tamper):
    path = link_for(action, olivia, mailoutbox)
    token = path.split("/")[2]
    tampered = reverse("decision_link", args=[tamper(token)])
    client_for(client, olivia)

    for response in (client.get(tampered), client.post(tampered, approve_form(action))):
        assert response.status_code == 400
        assert "This link is not valid" in response.content.decode()
    assert unchanged(action)


def test_a_link_to_a_superseded_intent_is_refused(client, tenant, olivia, action, mailoutbox):
    path = link_for(action, olivia, mailoutbox)
    action_edit_and_approve(
        action=action,
        editor=make_user(tenant, "operator"),
        args={"resolution": "duplicate"},
        reason="it was a duplicate",
        **binding(action),
    )
    client_for(client, olivia)

    response = client.post(path, approve_form(action))

    assert response.status_code == 409
    assert "This intent was superseded" in response.content.decode()
    action.refresh_from_db()
    assert action.status == "superseded"
    assert not DecisionLinkUse.objects.exists()


def test_a_decision_bound_to_another_version_is_refused_and_leaves_the_link_usable(
    client, olivia, action, mailoutbox
):
    path = link_for(action, olivia, mailoutbox)
    client_for(client, olivia)
    stale = {**approve_form(action), "seen_state_version": action.base_version - 1}

    refused = client.post(path, stale)

    assert refused.status_code == 409
    assert "the run changed since you looked" in refused.content.decode()
    assert unchanged(action)
    assert client.post(path, approve_form(action)).status_code == 200
