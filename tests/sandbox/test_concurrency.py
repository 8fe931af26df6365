"""Same-key races against a real threaded server: the ledger must show one effect."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.sandbox.support import close_ticket, effects, ticket

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

CALLERS = 20


def race(callers: int, call):
    """Run call(i) from callers threads released at the same moment."""
    barrier = threading.Barrier(callers)

    def released(index: int):
        barrier.wait()
        return call(index)

    with ThreadPoolExecutor(max_workers=callers) as pool:
        return list(pool.map(released, range(callers)))


def test_twenty_concurrent_closes_with_one_key_make_exactly_one_effect(sandbox_url):
    responses = race(CALLERS, lambda _: close_ticket(sandbox_url, "ticket-5", key="same-key"))

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * (CALLERS - 1) + [201]
    assert len({response.json()["receipt_id"] for response in responses}) == 1
    assert len(effects(sandbox_url, key="same-key")) == 1
    assert ticket(sandbox_url, "ticket-5")["version"] == 2


def test_concurrent_closes_with_different_keys_close_the_ticket_once(sandbox_url):
    responses = race(10, lambda index: close_ticket(sandbox_url, "ticket-6", key=f"key-{index}"))

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [201] + [409] * 9
    assert len(effects(sandbox_url, tool="ticket.close")) == 1
