"""What the inbox computes once per item prints exactly what the template tags printed, and
its proposer list names each proposer of a waiting request once, in order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.template import engines
from django.urls import reverse
from django.utils import timezone

from runs.pages.presenters import Countdown, PathsById, truncated
from runs.selectors import inbox_proposers
from tests.factories import approve, make_user
from tests.pages.conftest import make_waiting

FILTERS = engines["django"].from_string(
    '{{ moment|date:"c" }}|{{ moment|date:"Y-m-d H:i:s T" }}|{{ moment|timeuntil:now }}'
)
NOW = datetime(2023, 10, 28, 12, 0, tzinfo=UTC)


def printed(countdown: Countdown) -> str:
    template = engines["django"].from_string("{{ a }}|{{ b }}|{{ c }}")
    return template.render({"a": countdown.iso, "b": countdown.stamp, "c": countdown.left})


@pytest.mark.parametrize(
    "moment",
    [
        NOW + timedelta(minutes=9, seconds=59, microseconds=123456),
        NOW + timedelta(days=2, hours=3),
        # 02:30 in Berlin happens twice on 2023-10-29: `date` prints no zone name for it.
        datetime(2023, 10, 29, 0, 30, tzinfo=UTC),
        datetime(2023, 10, 29, 1, 30, tzinfo=UTC),
    ],
)
@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "Asia/Kolkata"])
def test_a_countdown_prints_what_the_date_and_timeuntil_filters_print(moment, zone):
    with timezone.override(zone):
        expected = FILTERS.render({"moment": moment, "now": NOW})

        assert printed(Countdown.of(moment, NOW)) == expected


def test_a_request_without_an_expiry_has_no_countdown():
    assert Countdown.of(None, NOW) is None


@pytest.mark.parametrize(
    "text",
    ["", "close the ticket", "x" * 160, "x" * 161, "é" * 170, "e\u0301" * 100, "\u212b" * 160],
)
def test_a_truncated_goal_is_what_truncatechars_prints(text):
    template = engines["django"].from_string("{{ text|truncatechars:160 }}")

    assert template.render({"text": truncated(text, 160)}) == template.render({"text": text})


@pytest.mark.parametrize(
    "name", ["inbox_approve", "inbox_reject", "inbox_edit", "inbox_ask_again", "run_detail"]
)
def test_paths_by_id_are_the_paths_reverse_gives(name):
    paths = PathsById()
    # The second id is put into the pattern the first one reversed.
    for pk in (uuid.uuid4(), uuid.UUID(int=1)):
        assert paths(name, pk) == reverse(name, args=[pk])


@pytest.mark.django_db
def test_the_proposer_list_names_each_proposer_of_a_waiting_request_once_in_order(
    tenant, other_tenant, django_assert_num_queries
):
    for name in ("agent-b", "agent-a", "agent-b", "agent-a"):
        make_waiting(tenant, proposed_by=name)
    approve(make_waiting(tenant, proposed_by="agent-decided"), make_user(tenant, "operator"))
    make_waiting(other_tenant, proposed_by="agent-elsewhere")

    with django_assert_num_queries(1):
        proposers = inbox_proposers(tenant=tenant)

    assert proposers == ["agent-a", "agent-b"]


@pytest.mark.django_db
def test_a_tenant_without_waiting_requests_has_no_proposers(tenant):
    assert inbox_proposers(tenant=tenant) == []
