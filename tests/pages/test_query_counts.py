"""Each page costs a fixed number of queries: 500 items cost what 5 cost (keyset pages of 50,
joins and prefetches owned by the selectors)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.selectors import INBOX_PAGE_SIZE, PAGE_SIZE
from runs.services import tool_policy_set
from runs.tools.registry import all_tools
from tests.factories import make_action, make_observation, make_run
from tests.pages.conftest import make_waiting
from tests.pages.test_plan_inbox import refunds_plan

pytestmark = pytest.mark.django_db

# Session, user, memberships; then the page's own reads (see each test).
# With the plans waiting (none here): one query; the duplicate notices (every request here
# has the same digest, so every card shows one): one query.
INBOX_QUERIES = 11
RUN_LIST_QUERIES = 5
RUN_PAGE_QUERIES = 11
TOOL_LIST_QUERIES = 5  # the tenant's tool policies, in one; its enabled connectors, in one


def add_waiting(tenant, count: int) -> None:
    for _ in range(count):
        make_waiting(tenant)


def run_links(page: str) -> set[str]:
    return set(re.findall(r'<a href="/runs/([0-9a-f-]{36})/">', page))


def items_on(page: str) -> int:
    return len(re.findall(r'<article id="action-', page))


def test_the_inbox_and_the_run_list_cost_the_same_queries_with_500_items_as_with_5(
    operator_client, tenant, django_assert_num_queries
):
    add_waiting(tenant, 5)
    with django_assert_num_queries(INBOX_QUERIES):
        small_inbox = operator_client.get(reverse("inbox")).content.decode()
    with django_assert_num_queries(RUN_LIST_QUERIES):
        operator_client.get(reverse("run_list"))

    add_waiting(tenant, 495)
    with django_assert_num_queries(INBOX_QUERIES):
        big_inbox = operator_client.get(reverse("inbox")).content.decode()
    with django_assert_num_queries(RUN_LIST_QUERIES):
        big_runs = operator_client.get(reverse("run_list")).content.decode()

    assert items_on(small_inbox) == 5
    assert items_on(big_inbox) == INBOX_PAGE_SIZE
    assert big_inbox.count("data-duplicate") == INBOX_PAGE_SIZE
    assert "<strong>500</strong> requests waiting" in big_inbox
    assert len(run_links(big_runs)) == PAGE_SIZE


def test_keyset_pages_walk_the_whole_inbox_once_at_a_fixed_cost(
    operator_client, tenant, django_assert_num_queries
):
    add_waiting(tenant, INBOX_PAGE_SIZE + 7)
    first = operator_client.get(reverse("inbox")).content.decode()
    next_url = re.search(r'href="(/inbox/\?after=[^"]+)"', first).group(1).replace("&amp;", "&")

    # Later pages skip the expired section and the plans.
    with django_assert_num_queries(INBOX_QUERIES - 2):
        second = operator_client.get(next_url).content.decode()

    seen_first = set(re.findall(r'<article id="action-([0-9a-f-]+)"', first))
    seen_second = set(re.findall(r'<article id="action-([0-9a-f-]+)"', second))
    assert len(seen_first) == INBOX_PAGE_SIZE
    assert len(seen_second) == 7
    assert not seen_first & seen_second
    assert "Later requests" not in second


def test_the_run_list_walks_its_keyset_pages(operator_client, tenant):
    for _ in range(PAGE_SIZE + 3):
        make_run(tenant)
    first = operator_client.get(reverse("run_list")).content.decode()
    next_url = re.search(r'href="(/runs/\?after=[^"]+)"', first).group(1).replace("&amp;", "&")

    second = operator_client.get(next_url).content.decode()

    assert len(run_links(second)) == 3


def test_the_run_page_costs_the_same_queries_with_500_events_as_with_5(
    operator_client, tenant, django_assert_num_queries
):
    action = make_waiting(tenant)
    run = action.run
    url = reverse("run_detail", args=[run.pk])
    with django_assert_num_queries(RUN_PAGE_QUERIES):
        operator_client.get(url)

    other = make_run(tenant)
    for number in range(500):
        make_observation(other, summary=f"seen {number}")
    make_action(other)
    with django_assert_num_queries(RUN_PAGE_QUERIES):
        page = operator_client.get(reverse("run_detail", args=[other.pk])).content.decode()

    assert page.count('<span class="seq">') == 100


def test_the_tools_page_reads_every_policy_in_one_query(
    operator_client, tenant, django_assert_num_queries
):
    with django_assert_num_queries(TOOL_LIST_QUERIES):
        operator_client.get(reverse("tool_list"))

    for tool in all_tools():
        tool_policy_set(
            tenant=tenant,
            tool=tool.name,
            needs_approval=False,
            four_eyes=False,
            required_approvals=1,
            approval_seconds=600,
            actor="tests",
        )
    with django_assert_num_queries(TOOL_LIST_QUERIES):
        page = operator_client.get(reverse("tool_list")).content.decode()

    assert page.count("data-needs-approval>no<") == len(all_tools())


def more_plans(page: str) -> str:
    return re.search(r'href="([^"]+)" data-more-plans', page).group(1).replace("&amp;", "&")


def plans_on(page: str) -> list[str]:
    return re.findall(r'<article id="plan-([0-9a-f-]+)"', page)


def test_the_inbox_pages_waiting_plans_from_their_stored_summaries_at_a_fixed_cost(
    operator_client, tenant, django_assert_num_queries
):
    # 60 plans of 30 items: reading every item of every waiting plan on each render would be
    # 1,800 rows; the page reads 25 plans and their first items, whatever the totals.
    for _ in range(60):
        refunds_plan(tenant, 30)

    # No single request waits (no approvals to prefetch, no duplicates to look up); a page of
    # plans and their first items.
    with django_assert_num_queries(INBOX_QUERIES - 1):
        first = operator_client.get(reverse("inbox")).content.decode()
    more = more_plans(first)
    with django_assert_num_queries(INBOX_QUERIES - 1):
        second = operator_client.get(more).content.decode()
    third = operator_client.get(more_plans(second)).content.decode()

    pages = [plans_on(first), plans_on(second), plans_on(third)]
    assert [len(found) for found in pages] == [INBOX_PAGE_SIZE, INBOX_PAGE_SIZE, 10]
    assert len(set().union(*pages)) == 60
    assert "data-more-plans" not in third
    # The card's summary, from the plan's row: every item counted, summed, compared.
    assert '<span class="tool">payment.refund</span> \u00d730' in first
    assert 'data-total="amount_cents">3435<' in first
    assert "<code>amount_cents</code>, <code>target</code>" in first
