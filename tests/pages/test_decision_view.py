"""The card's forms carry the digest of the decision view they show; the decision receipt
signs that view, and a decision posted for another view is refused, changing nothing."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.models import Approval, Statement
from runs.selectors.decision_views import decision_view, view_digest
from tests.pages.conftest import HTMX, binding, make_waiting

pytestmark = pytest.mark.django_db


def _shown_view_digests(page: str) -> set[str]:
    return set(re.findall(r'name="seen_view" value="(sha256:[0-9a-f]{64})"', page))


def test_the_card_shows_the_view_its_approval_signs(operator_client, tenant):
    action = make_waiting(tenant)

    page = operator_client.get(reverse("inbox")).content.decode()
    [shown] = _shown_view_digests(page)  # the approve and the reject form carry the same
    assert shown == view_digest(decision_view(action))
    response = operator_client.post(
        reverse("inbox_approve", args=[action.pk]), {**binding(action), "seen_view": shown}, **HTMX
    )

    assert response.status_code == 200
    statement = Statement.objects.get(action=action, kind="decision")
    assert (statement.body["view_seen"], statement.body["view_digest"]) == (shown, shown)
    assert statement.body["view"]["target"] == action.target
    assert statement.body["decider"]["authenticated"] == "session"


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_on_another_view_is_refused_and_nothing_changes(
    operator_client, tenant, decision
):
    action = make_waiting(tenant)
    other = "sha256:" + "0" * 64
    form = {**binding(action), "seen_view": other, "preset": "Wrong target"}

    response = operator_client.post(reverse(f"inbox_{decision}", args=[action.pk]), form, **HTMX)

    assert response.status_code == 409
    page = response.content.decode()
    assert "Refused: the card changed since you looked" in page
    assert "What you saw is not what this request shows now; review it again." in page
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert not Approval.objects.filter(action=action).exists()
    assert not Statement.objects.filter(action=action).exists()
