"""The reconciliation pages cost a fixed number of queries: 200 cases cost what 5 cost (a keyset
page, the probing cases apart, the counts in one grouped query), and a case with 200 attempts
and a run full of other writes costs what a case with 5 attempts costs."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from reconciliation import selectors
from reconciliation.models import ReconciliationCase
from reconciliation.selectors import ATTEMPTS_SHOWN, PAGE_SIZE
from reconciliation.services import case_resolve
from runs.models import Action, Run
from runs.services import lease_claim, lease_release, protocol
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user
from tests.pages.conftest import client_for
from tests.reconciliation.test_cases import make_uncertain, probe_until_settled
from tests.reconciliation.test_views import UNREACHABLE_SANDBOX, settle_with_receipt

pytestmark = pytest.mark.django_db

# Session, user, memberships; then the counts, the page of cases, the cases being probed.
QUEUE_QUERIES = 6
# Session, user, memberships; then the case, its attempts, the run's other writes, the case's
# audit history, the tool's policy (and, the tenant having set none, its enabled connectors).
CASE_QUERIES = 9


@pytest.fixture(autouse=True)
def sandbox_down(settings):
    settings.SANDBOX_URL = UNREACHABLE_SANDBOX


@pytest.fixture
def tenant():
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", four_eyes=True)
    return tenant


@pytest.fixture
def operator(tenant):
    return make_user(tenant, "operator")


@pytest.fixture
def reconciler_client(client, tenant):
    return client_for(client, make_user(tenant, "reconciler"))


def approved(run: Run, operator, **fields) -> Action:
    action = make_action(run, **fields)
    approve(action, operator)
    return action


def add_cases(tenant, operator, count: int) -> None:
    """Of every five cases: three open, one awaiting a second reconciler, one still probing."""
    proposer = make_user(tenant, "reconciler")
    for number in range(count):
        kind = number % 5
        tool = "ticket.close" if kind == 3 else "notify.send"
        args = {"resolution": "ok"} if tool == "ticket.close" else {"body": f"note {number}"}
        target = f"ticket-{number + 1}" if tool == "ticket.close" else f"n{number}@example.com"
        case = make_uncertain(
            approved(make_run(tenant), operator, tool=tool, target=target, args=args)
        )
        if kind == 4:
            continue
        case = probe_until_settled(case)
        if kind == 3:
            case_resolve(case=case, user=proposer, resolution="abandon", note="duplicate")


def cases_on(page: str) -> int:
    return len(re.findall(r'<tr id="case-', page))


def test_the_queue_costs_the_same_queries_with_200_cases_as_with_5(
    reconciler_client, tenant, operator, django_assert_num_queries
):
    add_cases(tenant, operator, 5)
    with django_assert_num_queries(QUEUE_QUERIES):
        small = reconciler_client.get(reverse("case_list")).content.decode()

    add_cases(tenant, operator, 195)
    with django_assert_num_queries(QUEUE_QUERIES):
        big = reconciler_client.get(reverse("case_list")).content.decode()

    assert cases_on(small) == 5
    assert "<strong>4</strong> waiting for a person" in small
    assert cases_on(big) == PAGE_SIZE + 20  # a page waiting for a person, 20 probed soonest
    assert "<strong>160</strong> waiting for a person" in big
    assert "(120 open · 40 awaiting a second reconciler)" in big
    assert "<strong>40</strong> being probed automatically" in big


def test_a_filtered_later_page_costs_no_more(
    reconciler_client, tenant, operator, django_assert_num_queries, monkeypatch
):
    monkeypatch.setattr(selectors, "PAGE_SIZE", 10)
    add_cases(tenant, operator, 25)
    query = {"tool": "notify.send", "reason": "dropped_connection"}
    first = reconciler_client.get(reverse("case_list"), query).content.decode()
    next_url = re.search(r'href="(/reconciliation/\?[^"]*after=[^"]+)"', first).group(1)

    with django_assert_num_queries(QUEUE_QUERIES - 1):  # later pages skip the probing cases
        second = reconciler_client.get(next_url.replace("&amp;", "&")).content.decode()

    assert cases_on(first) == 10 + 5  # a page of the 15 open, and the 5 being probed
    assert cases_on(second) == 5
    assert "<strong>15</strong> match the filters" in second


def lost_after_retries(tenant, operator, *, attempts: int, other_writes: int) -> ReconciliationCase:
    """A run with `other_writes` settled writes, then one retried `attempts - 1` times after
    provable non-effects whose last try's outcome is unknown."""
    run = make_run(tenant)
    for number in range(other_writes):
        settle_with_receipt(approved(run, operator, action_id=f"close-{number}", target="ticket-3"))
    action = approved(
        run,
        operator,
        action_id="notify",
        tool="notify.send",
        target="a@example.com",
        args={"body": "Hi"},
    )
    lease = lease_claim(run_id=run.pk, owner="test-worker")
    for _ in range(attempts - 1):
        attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="test-worker")
        protocol.attempt_failed(
            attempt_pk=attempt.pk,
            lease=lease,
            error_class="transient",
            detail="HTTP 503: try again",
            worker="test-worker",
            retry_in=0,
        )
    lease_release(lease=lease)
    return probe_until_settled(make_uncertain(action))


def test_a_case_page_costs_the_same_queries_with_200_attempts_as_with_5(
    reconciler_client, tenant, operator, django_assert_num_queries
):
    small = lost_after_retries(tenant, operator, attempts=5, other_writes=1)
    big = lost_after_retries(tenant, operator, attempts=200, other_writes=12)

    with django_assert_num_queries(CASE_QUERIES):
        reconciler_client.get(reverse("case_detail", args=[small.pk]))
    with django_assert_num_queries(CASE_QUERIES):
        page = reconciler_client.get(reverse("case_detail", args=[big.pk])).content.decode()

    assert page.count('<span class="badge status-failed">Failed</span>') == ATTEMPTS_SHOWN - 1
    assert f"{200 - ATTEMPTS_SHOWN} earlier ones" in page
    assert page.count("digest matches</span>") == 12
