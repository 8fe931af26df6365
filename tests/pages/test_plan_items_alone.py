"""A plan's intents are decided only with their plan: every per-item route of the inbox (approve,
reject, edit then approve, ask again, bulk) and a mail's link refuse an item with a message that
names the plan, change nothing, and leave the plan decidable as a whole (issue 27)."""

from __future__ import annotations

import time

import pytest
from django.core import signing
from django.urls import reverse

from runs.decision_links import SALT
from runs.models import Action, Approval, Plan
from runs.services import PlanItem, plan_expire, plan_propose
from tests.factories import make_observation, make_run, make_user
from tests.pages.conftest import HTMX, binding, client_for, expiring_in_a_second, flashed
from tests.runs.services.test_plan_items_alone import assert_approved_as_a_whole_and_executed

pytestmark = pytest.mark.django_db


def closes_plan(tenant, count: int = 3) -> Plan:
    run = make_run(tenant, goal="close the tickets of the outage")
    items = [
        PlanItem(
            action_id=f"close-{n}",
            tool="ticket.close",
            target=f"ticket-{n}",
            args={"resolution": "fixed"},
        )
        for n in range(1, count + 1)
    ]
    plan, _ = plan_propose(
        run=run, items=items, observation=make_observation(run), proposed_by="agent-token"
    )
    return plan


def third(plan: Plan) -> Action:
    return plan.items.get(position=2)


def refused_here(plan: Plan) -> str:
    """The refusal's words, as any edge shows them (a page starts it with a capital)."""
    return f"is item 3 of 3 of a plan; decide the plan as a whole at /inbox/plans/{plan.pk}/"


def assert_nothing_changed(plan: Plan) -> None:
    """Every item still waits, bound to the plan, and no new intent was frozen beside them."""
    plan.refresh_from_db()
    assert plan.status == "waiting_approval"
    assert list(plan.items.values_list("status", flat=True)) == ["waiting_approval"] * 3
    assert Action.objects.filter(run=plan.run).count() == 3
    assert not Approval.objects.filter(action__plan=plan).exists()


def per_item_posts(item: Action) -> list[tuple[str, dict]]:
    shown = binding(item)
    return [
        (reverse("inbox_approve", args=[item.pk]), shown),
        (reverse("inbox_reject", args=[item.pk]), {**shown, "reason": "not this one"}),
        (
            reverse("inbox_edit", args=[item.pk]),
            {**shown, "arg__resolution": "duplicate", "step": "approve"},
        ),
        (reverse("inbox_ask_again", args=[item.pk]), {}),
    ]


def test_a_plain_post_on_any_per_item_route_is_refused_naming_the_plan(
    operator_client, tenant, operator
):
    plan = closes_plan(tenant)
    item = third(plan)

    for url, form in per_item_posts(item):
        response = operator_client.post(url, form)

        if url.endswith("/edit/"):  # the edit page answers itself, with no form to submit
            assert response.status_code == 409
            page = response.content.decode()
            assert refused_here(plan) in page
            assert 'name="step"' not in page
        else:
            assert response.status_code == 302
            assert any(refused_here(plan) in message for message in flashed(response)), url
        assert_nothing_changed(plan)

    assert_approved_as_a_whole_and_executed(plan, operator)


def test_an_htmx_post_on_any_per_item_route_answers_409_with_the_message(
    operator_client, tenant, operator
):
    plan = closes_plan(tenant)
    item = third(plan)

    for url, form in per_item_posts(item):
        response = operator_client.post(url, form, **HTMX)

        assert response.status_code == 409, url
        assert refused_here(plan) in response.content.decode(), url
        assert_nothing_changed(plan)

    assert_approved_as_a_whole_and_executed(plan, operator)


def test_the_edit_page_of_a_plan_item_shows_no_form_and_links_the_plan(operator_client, tenant):
    plan = closes_plan(tenant)

    for extra in ({}, HTMX):
        response = operator_client.get(reverse("inbox_edit", args=[third(plan).pk]), **extra)

        page = response.content.decode()
        assert response.status_code == 409
        assert refused_here(plan) in page
        assert 'name="arg__resolution"' not in page
        assert f'href="{reverse("inbox_plan", args=[plan.pk])}"' in page
    assert_nothing_changed(plan)


def test_a_bulk_decision_refuses_a_plan_item_and_decides_the_rest(operator_client, tenant):
    plan = closes_plan(tenant)
    item = third(plan)
    selected = f"{item.pk}/{item.base_version}/{item.intent_digest}"

    plain = operator_client.post(
        reverse("inbox_bulk"), {"decision": "approve", "selected": [selected]}
    )
    htmx = operator_client.post(
        reverse("inbox_bulk"), {"decision": "approve", "selected": [selected]}, **HTMX
    )

    assert plain.status_code == 302
    assert any(refused_here(plan) in message for message in flashed(plain))
    assert refused_here(plan) in htmx.content.decode()
    assert_nothing_changed(plan)


def test_ask_again_on_an_item_of_an_expired_plan_is_refused_and_proposes_nothing(
    operator_client, tenant
):
    expiring_in_a_second(tenant)
    plan = closes_plan(tenant)
    time.sleep(1.05)
    assert plan_expire(plan=plan)

    response = operator_client.post(reverse("inbox_ask_again", args=[third(plan).pk]), **HTMX)

    assert response.status_code == 409
    assert refused_here(plan) in response.content.decode()
    assert Action.objects.filter(run=plan.run).count() == 3
    assert set(plan.items.values_list("status", flat=True)) == {"expired"}


def test_another_tenants_user_gets_404_on_every_per_item_route(
    client, tenant, other_tenant, operator
):
    plan = closes_plan(tenant)
    item = third(plan)
    client_for(client, make_user(other_tenant, "operator"))

    for url, form in per_item_posts(item):
        assert client.post(url, form).status_code == 404, url
        assert client.post(url, form, **HTMX).status_code == 404, url
    assert client.get(reverse("inbox_edit", args=[item.pk])).status_code == 404
    assert_nothing_changed(plan)
    assert_approved_as_a_whole_and_executed(plan, operator)


def signed_link(item: Action, approver, *, plan: Plan | None = None) -> str:
    """A decision link's token as Countersign signs it, naming `item` alone or with `plan`
    (links for a plan's item always name its own plan; these are the ones it never mints)."""
    claims = {
        "a": str(item.pk),
        "u": approver.pk,
        "d": plan.digest if plan else item.intent_digest,
        "n": f"nonce-{plan.pk if plan else item.pk}",
        "e": int((plan or item).expires_at.timestamp()),
    }
    if plan is not None:
        claims["p"] = str(plan.pk)
    return signing.dumps(claims, salt=SALT)


def test_a_decision_link_that_names_a_plan_item_alone_is_refused(client, tenant, operator):
    """A link signed for the item without its plan (as links were minted for single intents)
    shows no decision form and decides nothing; the plan is still decided as a whole."""
    plan = closes_plan(tenant)
    item = third(plan)
    token = signed_link(item, operator)
    client_for(client, operator)
    url = reverse("decision_link", args=[token])

    shown = client.get(url)
    posted = client.post(url, {**binding(item), "decision": "approve"})

    for response in (shown, posted):
        assert response.status_code == 409
        page = response.content.decode()
        assert "This write is part of a plan" in page
        assert f"/inbox/plans/{plan.pk}/" in page
    assert_nothing_changed(plan)
    assert_approved_as_a_whole_and_executed(plan, operator)


def test_a_decision_link_that_pairs_an_item_with_another_plan_decides_nothing(
    client, tenant, operator
):
    """A link decides the plan its write is part of, never another one it names."""
    plan, other = closes_plan(tenant), closes_plan(tenant)
    item = third(plan)
    token = signed_link(item, operator, plan=other)
    client_for(client, operator)

    response = client.post(
        reverse("decision_link", args=[token]),
        {
            "seen_digest": other.digest,
            "seen_state_version": other.base_version,
            "decision": "approve",
        },
    )

    assert response.status_code == 409
    assert "a plan its write is not part of" in response.content.decode()
    assert_nothing_changed(plan)
    assert_nothing_changed(other)
