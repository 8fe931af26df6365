"""Every fault kind, observed from a real HTTP client against a real server (live_server)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest
import requests

from tests.sandbox.support import TIMEOUT, close_ticket, effects, set_fault, ticket

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_fail_before_commit_answers_500_and_commits_nothing(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="fail_before_commit")

    failed = close_ticket(sandbox_url, "ticket-1", key="k-1")

    assert failed.status_code == 500
    assert failed.json()["type"] == "injected_failure"
    assert effects(sandbox_url) == []
    assert ticket(sandbox_url, "ticket-1")["status"] == "open"
    # Consumed: the same key now goes through.
    assert close_ticket(sandbox_url, "ticket-1", key="k-1").status_code == 201


def test_commit_then_drop_commits_and_the_client_sees_a_broken_connection(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_drop")

    with pytest.raises(requests.exceptions.ChunkedEncodingError, match="IncompleteRead"):
        close_ticket(sandbox_url, "ticket-1", key="k-1")

    assert [(effect["tool"], effect["idempotency_key"]) for effect in effects(sandbox_url)] == [
        ("ticket.close", "k-1")
    ]
    assert ticket(sandbox_url, "ticket-1") == {"id": "ticket-1", "status": "closed", "version": 2}


def test_commit_then_drop_on_a_raw_socket_ends_the_connection_mid_body(sandbox_url, live_server):
    """Below requests: the headers promise more bytes than arrive before the server's FIN."""
    set_fault(sandbox_url, tool="notify.send", fault="commit_then_drop")
    address = urlsplit(live_server.url)
    body = b'{"recipient": "ops@example.com", "body": "hi"}'
    with socket.create_connection((address.hostname, address.port), timeout=5) as client:
        client.sendall(
            f"POST /sandbox/notifications HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while chunk := client.recv(65536):
            received += chunk

    head, _, partial = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    assert status_line.startswith("HTTP/1.1 201")
    assert 0 < len(partial) < int(headers["Content-Length"])
    assert len(effects(sandbox_url, tool="notify.send")) == 1


def test_commit_then_malformed_commits_and_answers_200_without_json(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_malformed")

    response = close_ticket(sandbox_url, "ticket-1", key="k-1")

    assert response.status_code == 200
    with pytest.raises(requests.exceptions.JSONDecodeError):
        response.json()
    assert len(effects(sandbox_url, key="k-1")) == 1


def test_commit_then_hang_commits_before_the_client_gives_up(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_hang:1")

    with pytest.raises(requests.exceptions.ReadTimeout):
        close_ticket(sandbox_url, "ticket-1", key="k-1", timeout=(2, 0.3))

    assert len(effects(sandbox_url, key="k-1")) == 1
    time.sleep(1)  # let the hanging request finish before the database is flushed


def test_hang_before_commit_commits_only_after_the_hang(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="hang_before_commit:1")

    with pytest.raises(requests.exceptions.ReadTimeout):
        close_ticket(sandbox_url, "ticket-1", key="k-1", timeout=(2, 0.3))

    assert effects(sandbox_url) == []
    deadline = time.monotonic() + 5
    while not effects(sandbox_url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(effects(sandbox_url, key="k-1")) == 1


def test_rate_limit_answers_429_with_retry_after_and_commits_nothing(sandbox_url):
    set_fault(sandbox_url, tool="payment.charge", fault="rate_limit:7")

    response = requests.post(
        sandbox_url + "payments/charges",
        json={"customer": "cus_1", "amount_cents": 100, "currency": "EUR"},
        headers={"Idempotency-Key": "c-1"},
        timeout=TIMEOUT,
    )

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert effects(sandbox_url) == []


def test_slow_delays_the_answer_and_then_succeeds(sandbox_url):
    set_fault(sandbox_url, tool="ticket.lookup", fault="slow:300")

    started = time.monotonic()
    response = requests.get(sandbox_url + "tickets/ticket-1", timeout=TIMEOUT)

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3


def test_a_fault_applies_to_exactly_the_next_count_calls_of_its_tool(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="fail_before_commit", count=2)

    statuses = [
        requests.get(sandbox_url + "tickets/ticket-1", timeout=TIMEOUT).status_code,
        close_ticket(sandbox_url, "ticket-1", key="k-1").status_code,
        close_ticket(sandbox_url, "ticket-1", key="k-1").status_code,
        close_ticket(sandbox_url, "ticket-1", key="k-1").status_code,
    ]

    assert statuses == [200, 500, 500, 201]


def test_pending_faults_are_listed_and_cleared(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_hang:2.5", count=3)
    set_fault(sandbox_url, tool="notify.send", fault="rate_limit:1")

    listed = requests.get(sandbox_url + "faults", timeout=TIMEOUT).json()["faults"]
    cleared = requests.delete(sandbox_url + "faults", timeout=TIMEOUT)

    assert [(plan["tool"], plan["fault"], plan["remaining"]) for plan in listed] == [
        ("ticket.close", "commit_then_hang:2.5", 3),
        ("notify.send", "rate_limit:1", 1),
    ]
    assert cleared.json() == {"cleared": 2}
    assert close_ticket(sandbox_url, "ticket-1", key="k-1").status_code == 201


@pytest.mark.parametrize(
    "plan",
    [
        {"tool": "ticket.reopen", "fault": "fail_before_commit", "count": 1},
        {"tool": "ticket.close", "fault": "explode", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_hang", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_hang:abc", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_hang:-1", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_hang:1e3", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_hang:601", "count": 1},
        {"tool": "ticket.close", "fault": "rate_limit:1.5", "count": 1},
        {"tool": "ticket.close", "fault": "slow:fast", "count": 1},
        {"tool": "ticket.close", "fault": "fail_before_commit:3", "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_drop", "count": 0},
        {"tool": "ticket.close", "fault": "commit_then_drop", "count": "2"},
        {"tool": "ticket.close", "fault": "commit_then_drop", "count": True},
        {"tool": "ticket.close", "fault": "commit_then_drop", "count": 1001},
        {"tool": "ticket.close", "fault": 5, "count": 1},
        {"tool": "ticket.close", "fault": "commit_then_drop", "count": 1, "when": "now"},
    ],
)
def test_a_malformed_fault_plan_is_refused(sandbox_url, plan):
    response = requests.post(sandbox_url + "faults", json=plan, timeout=TIMEOUT)

    assert response.status_code == 400
    assert response.json()["type"] == "invalid_request"
    assert requests.get(sandbox_url + "faults", timeout=TIMEOUT).json() == {"faults": []}


def test_faults_are_not_found_and_not_applied_when_fault_injection_is_off(sandbox_url, settings):
    set_fault(sandbox_url, tool="ticket.close", fault="fail_before_commit")
    settings.SANDBOX_FAULTS = False

    added = requests.post(
        sandbox_url + "faults",
        json={"tool": "ticket.close", "fault": "fail_before_commit", "count": 1},
        timeout=TIMEOUT,
    )
    cleared = requests.delete(sandbox_url + "faults", timeout=TIMEOUT)
    closed = close_ticket(sandbox_url, "ticket-1", key="k-1")

    assert (added.status_code, cleared.status_code) == (404, 404)
    # The plan made while faults were on is ignored now.
    assert closed.status_code == 201
