"""`manage.py connectors test`: the contract suite against a tool's configured system, each
check printed as passed, failed with why, or not applicable with why. Against the sandbox
the demo's tools keep their contract; a payment server that ignores Idempotency-Key is
caught; without --allow-writes nothing is written."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runs.tools.testing import ContractSuite
from tests.registry import connector_tools, registered
from tests.sandbox.support import effects

SANDBOX = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
# The sandbox holds tickets 1 to 100, each closed once: {n} counts from 1, a ticket a call.
CLOSE = ["ticket.close", "--target", "ticket-{n}", "--args", '{"resolution": "fixed"}']
CLOSE += ["--first", "1"]


def contract_test(capsys, *arguments: str) -> tuple[str, CommandError | None]:
    """What `connectors test ARGUMENTS` printed, and the error it ended with, if any."""
    try:
        call_command("connectors", "test", *arguments)
    except CommandError as error:
        return capsys.readouterr().out, error
    return capsys.readouterr().out, None


def check_lines(printed: str) -> dict[str, str]:
    """Each check's printed line, by the check's name: 'passed', 'failed: why', ..."""
    lines = {}
    for line in printed.splitlines():
        found = re.fullmatch(r"  (passed|failed|not applicable) +(\w+)(: .*)?", line)
        if found:
            lines[found[2]] = found[1] + (found[3] or "")
    return lines


@SANDBOX
def test_the_demos_ticket_close_keeps_its_contract_against_the_sandbox(sandbox_url, capsys):
    printed, error = contract_test(capsys, *CLOSE, "--allow-writes")
    print(printed)

    assert error is None, printed
    lines = check_lines(printed)
    assert set(lines) == set(ContractSuite.CHECKS)
    assert printed.startswith("ticket.close v1 against its system, writes allowed:\n")
    for name in ("same_call_twice_same_receipt", "query_finds_the_receipt"):
        assert lines[name] == "passed"
    assert lines["write_makes_one_effect"] == "not applicable: no effect counter given"
    assert printed.endswith("ticket.close v1: 8 passed, 0 failed, 5 not applicable\n")
    # Three checks closed a ticket each (same_call_twice: one, twice): {n} gave each its own.
    closed = [effect["target"] for effect in effects(sandbox_url, tool="ticket.close")]
    assert len(closed) == len(set(closed)) == 3


@SANDBOX
def test_the_demos_payment_charge_keeps_its_contract_against_the_sandbox(sandbox_url, capsys):
    charge = [
        "payment.charge",
        "--target",
        "cus_42",
        "--args",
        '{"amount_cents": 1250, "currency": "eur"}',
    ]
    printed, error = contract_test(capsys, *charge, "--allow-writes")
    print(printed)

    assert error is None, printed
    assert check_lines(printed)["same_call_twice_same_receipt"] == "passed"
    assert printed.endswith("payment.charge v1: 8 passed, 0 failed, 5 not applicable\n")


@SANDBOX
def test_without_allow_writes_nothing_is_written_and_the_write_checks_say_why(sandbox_url, capsys):
    printed, error = contract_test(capsys, *CLOSE)

    assert error is None, printed
    lines = check_lines(printed)
    why = "not applicable: it would send a write, and writes are not allowed here"
    for name in ("execute_returns_a_receipt", "same_call_twice_same_receipt"):
        assert lines[name] == why
    # A query by key is a read: it runs, and a key never sent is found to be unused.
    assert lines["query_of_an_unused_key_is_none"] == "passed"
    assert lines["normalize_is_idempotent"] == "passed"
    assert effects(sandbox_url) == []


@SANDBOX
def test_a_read_with_no_call_given_runs_what_needs_none(sandbox_url, capsys):
    printed, error = contract_test(capsys, "ticket.lookup")

    assert error is None, printed
    lines = check_lines(printed)
    assert lines["flags_are_consistent"] == "passed"
    assert lines["read_only_needs_no_idempotency"] == "passed"
    reason = "not applicable: no call given to make (a target and arguments)"
    assert lines["execute_returns_a_receipt"] == reason


class ForgetfulPayments:
    """A 'Stripe-compatible' payment server that ignores Idempotency-Key: every POST is a
    new charge."""

    def __init__(self) -> None:
        self.charges: list[dict] = []
        self.numbers = itertools.count(1)


@pytest.fixture
def forgetful() -> Iterator[tuple[ForgetfulPayments, str]]:
    payments = ForgetfulPayments()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            charge = {"id": f"ch_{next(payments.numbers)}", **json.loads(self.rfile.read(length))}
            payments.charges.append(charge)
            body = json.dumps(charge).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield payments, f"http://127.0.0.1:{server.server_address[1]}/v1/"
    server.shutdown()
    server.server_close()


def forgetful_connector(base_url: str) -> str:
    """The connector the docs' own way declares: idempotent, deduplicated by the header."""
    return f"""
[connectors.pay]
kind = "http"
base_url = "{base_url}"

[connectors.pay.tools.charge]
contract_version = "v1"
effect_class = "idempotent"
method = "POST"
path = "charges"
idempotency_header = "Idempotency-Key"
body = {{ customer = "{{target}}", amount = "{{args.amount}}" }}
receipt = {{ id = "{{/id}}" }}
target_schema = {{ type = "string", pattern = "^cus_[a-z0-9]+$" }}

[connectors.pay.tools.charge.args_schema]
type = "object"
properties.amount = {{ type = "integer", minimum = 1 }}
required = ["amount"]
additionalProperties = false
"""


@pytest.mark.django_db
def test_a_server_that_ignores_idempotency_keys_is_reported_before_a_real_write(
    forgetful, tmp_path, capsys
):
    payments, base_url = forgetful
    [tool] = connector_tools(tmp_path, forgetful_connector(base_url))
    with registered(tool):
        printed, error = contract_test(
            capsys,
            "pay.charge",
            "--target",
            "cus_42",
            "--args",
            '{"amount": 1250}',
            "--allow-writes",
        )
    print(printed)

    assert str(error) == "pay.charge breaks its contract: same_call_twice_same_receipt"
    lines = check_lines(printed)
    assert re.fullmatch(
        r"failed: the same call answered ch_\d+, then ch_\d+",
        lines["same_call_twice_same_receipt"],
    )
    assert lines["execute_returns_a_receipt"] == "passed"
    # The one call sent twice made two charges: exactly what a resend after a 503 would do.
    twice = [charge for charge in payments.charges if charge["customer"] == "cus_42"]
    assert len(twice) >= 3
    assert printed.endswith("pay.charge v1: 5 passed, 1 failed, 7 not applicable\n")


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["no.such_tool"], "no.such_tool"),
        (["ticket.close", "--version", "v9"], "has no contract version 'v9'"),
        (["ticket.close", "--target", "ticket-1"], "give --target and --args together"),
        (["ticket.close", "--target", "t", "--args", "{resolution}"], "--args is not JSON"),
        (["ticket.close", "--target", "t", "--args", "[1]"], "--args must be a JSON object"),
        (
            ["ticket.close", "--target", "TKT 1", "--args", '{"resolution": "fixed"}'],
            "ticket.close refuses the call given: target must match",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(capsys, arguments, words):
    printed, error = contract_test(capsys, *arguments)
    assert error is not None
    assert words in str(error)
    assert printed == ""
