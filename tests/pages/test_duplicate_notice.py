"""The inbox marks a request identical (same digest) to another open or recently executed
intent of the tenant, naming it: one query for the whole page, whatever its size."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from runs.models import Action
from runs.selectors import duplicate_intents
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run, make_user
from tests.pages.conftest import make_waiting

pytestmark = pytest.mark.django_db


def card(page: str, action: Action) -> str:
    start = page.index(f'<article id="action-{action.pk}"')
    return page[start : page.index("</article>", start)]


def executed(tenant, **fields) -> Action:
    action = make_action(make_run(tenant, goal="close the fixed tickets"), **fields)
    approve(action, make_user(tenant, "operator"))
    return execute_with_receipt(action, receipt_id="rcpt-7")


def test_a_request_identical_to_a_write_executed_minutes_ago_says_so_naming_it(
    operator_client, tenant
):
    done = executed(tenant, proposed_by="agent:desktop")
    again = make_waiting(tenant)
    other = make_waiting(tenant, target="ticket-8")

    page = operator_client.get(reverse("inbox")).content.decode()

    notice = card(page, again)
    assert "data-duplicate" in notice
    assert "Identical to a write executed" in notice
    assert "agent:desktop" in notice
    assert reverse("run_detail", args=[done.run_id]) in notice
    assert "may do it again" in notice
    assert "data-duplicate" not in card(page, other)


def test_two_open_requests_with_one_digest_point_at_each_other(operator_client, tenant):
    first, second = make_waiting(tenant), make_waiting(tenant)

    page = operator_client.get(reverse("inbox")).content.decode()

    for mine, theirs in ((first, second), (second, first)):
        notice = card(page, mine)
        assert "Identical to a request still open (waiting approval)" in notice
        assert reverse("run_detail", args=[theirs.run_id]) in notice


def test_another_tenants_twin_and_an_old_execution_are_not_duplicates(
    operator_client, tenant, other_tenant
):
    make_waiting(other_tenant)
    old = executed(tenant)
    # Age the execution past the window, as a day's clock would.
    Action.objects.filter(pk=old.pk).update(updated_at=old.updated_at - timedelta(hours=25))
    waiting = make_waiting(tenant)

    page = operator_client.get(reverse("inbox")).content.decode()

    assert "data-duplicate" not in card(page, waiting)


def test_the_selector_costs_one_query_for_a_page_of_any_size(tenant, django_assert_num_queries):
    executed(tenant)
    few = [make_waiting(tenant) for _ in range(2)]
    many = few + [make_waiting(tenant, target=f"ticket-{n}") for n in range(20, 40)]

    with django_assert_num_queries(1):
        small = duplicate_intents(few, tenant=tenant)
    with django_assert_num_queries(1):
        large = duplicate_intents(many, tenant=tenant)

    assert set(small) == {str(action.pk) for action in few}
    assert all(duplicate.executed and duplicate.others == 1 for duplicate in small.values())
    assert set(large) == set(small)
