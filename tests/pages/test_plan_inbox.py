"""A plan in the inbox: one item whatever its size (count, tools, what differs, totals, the
plan digest, its first intents), approved or rejected as one, at a fixed query cost."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.models import Action, Plan
from runs.services import PlanItem, plan_propose
from tests.factories import make_observation, make_run
from tests.pages.conftest import flashed

pytestmark = pytest.mark.django_db

PLAN_INBOX_QUERIES = 10  # no single request (no approvals prefetched); the plans' first items


def refunds_plan(tenant, count: int) -> Plan:
    run = make_run(tenant, goal="refund the customers of the outage")
    items = [
        PlanItem(
            action_id=f"refund-{n}",
            tool="payment.refund",
            target="ch_" + f"{n:032x}",
            args={"amount_cents": 100 + n},
        )
        for n in range(count)
    ]
    plan, _ = plan_propose(
        run=run, items=items, observation=make_observation(run), proposed_by="agent-token"
    )
    return plan


def binding(plan: Plan) -> dict:
    return {"seen_digest": plan.digest, "seen_state_version": plan.base_version}


def test_a_plan_is_one_item_with_what_a_person_needs_to_decide(operator_client, tenant):
    plan = refunds_plan(tenant, 3)

    page = operator_client.get(reverse("inbox")).content.decode()

    card = page[page.index(f'id="plan-{plan.pk}"') :]
    assert "Plan of <strong>3</strong> intents" in card
    assert '<span class="tool">payment.refund</span> \u00d73' in card
    assert "<code>amount_cents</code>, <code>target</code>" in card  # what differs
    assert 'data-total="amount_cents">303<' in card
    assert plan.digest[7:19] in card
    assert card.count("<tr><td>") == 3
    assert 'id="action-' not in page  # its items are not items of their own
    # The counter counts the plan, one decision, apart from single requests.
    assert "<strong>0</strong> requests waiting · <strong>1</strong> plan waiting" in page


def test_one_approval_in_the_inbox_approves_every_intent(operator_client, tenant):
    plan = refunds_plan(tenant, 3)

    response = operator_client.post(reverse("inbox_plan_approve", args=[plan.pk]), binding(plan))

    assert any("Approved all 3" in message for message in flashed(response))
    assert set(plan.items.values_list("status", flat=True)) == {"approved"}
    assert f'id="plan-{plan.pk}"' not in operator_client.get(reverse("inbox")).content.decode()


def test_a_rejection_needs_a_reason_and_a_stale_view_is_refused(operator_client, tenant):
    plan = refunds_plan(tenant, 2)

    no_reason = operator_client.post(reverse("inbox_plan_reject", args=[plan.pk]), binding(plan))
    stale = operator_client.post(
        reverse("inbox_plan_approve", args=[plan.pk]),
        {**binding(plan), "seen_digest": "sha256:" + "0" * 64},
    )

    assert any("Plan of 2" in message for message in flashed(no_reason))
    assert any("refused" in message for message in flashed(stale))
    assert set(plan.items.values_list("status", flat=True)) == {"waiting_approval"}
    rejected = operator_client.post(
        reverse("inbox_plan_reject", args=[plan.pk]),
        {**binding(plan), "reason": "the outage list is not final"},
    )
    assert any("Rejected all 2" in message for message in flashed(rejected))
    assert set(Action.objects.values_list("status", flat=True)) == {"rejected"}


def test_a_plan_of_1000_costs_the_inbox_what_a_plan_of_3_does(
    operator_client, tenant, django_assert_num_queries
):
    refunds_plan(tenant, 3)
    with django_assert_num_queries(PLAN_INBOX_QUERIES):
        operator_client.get(reverse("inbox"))

    big = refunds_plan(tenant, 1000)
    with django_assert_num_queries(PLAN_INBOX_QUERIES):
        page = operator_client.get(reverse("inbox")).content.decode()

    card = page[page.index(f'id="plan-{big.pk}"') :]
    assert "Plan of <strong>1000</strong> intents" in card
    assert "and 950 more" in card


def test_every_intent_of_a_plan_is_a_page_away_paged_and_searchable(operator_client, tenant):
    plan = refunds_plan(tenant, 120)
    url = reverse("inbox_plan", args=[plan.pk])

    first = operator_client.get(url).content.decode()
    following = re.search(r'href="([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    second = operator_client.get(following).content.decode()
    found = operator_client.get(url, {"q": f"{77:032x}"}).content.decode()

    row = "<td><code>payment.refund</code></td>"
    assert first.count(row) == second.count(row) == 50
    assert f"<td>1</td>{row}" in first
    assert f"<td>51</td>{row}" in second
    assert found.count(row) == 1
    assert f"<td>78</td>{row}" in found


def test_an_operator_drops_intents_and_the_new_version_waits_alone(operator_client, tenant):
    plan = refunds_plan(tenant, 3)
    first, second, third = plan.items.order_by("position")
    url = reverse("inbox_plan", args=[plan.pk])
    assert "data-drop-items" in operator_client.get(url).content.decode()

    response = operator_client.post(
        reverse("inbox_plan_drop", args=[plan.pk]),
        {**binding(plan), "drop": [str(second.pk)], "reason": "refunded by hand already"},
    )

    revised = Plan.objects.get(supersedes=plan)
    assert response.url == reverse("inbox_plan", args=[revised.pk])
    assert any("Dropped 1: a new version of 2" in m for m in flashed(response))
    second.refresh_from_db()
    assert second.status == "cancelled"
    inbox = operator_client.get(reverse("inbox")).content.decode()
    assert f'id="plan-{revised.pk}"' in inbox
    assert f'id="plan-{plan.pk}"' not in inbox
    old_page = operator_client.get(url).content.decode()
    assert "A newer version replaced this plan" in old_page
    refused = operator_client.post(
        reverse("inbox_plan_drop", args=[revised.pk]),
        {**binding(revised), "drop": [str(first.pk), str(third.pk)], "reason": "all"},
    )
    assert any("reject it" in m for m in flashed(refused))
