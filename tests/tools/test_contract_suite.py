"""runs.tools.testing against real systems: the sandbox's five tools over live HTTP, the
benchmark's two python tools, and tools that break their contract, which it must catch.

Run with -s to see each tool's line (`ticket.close v1: 11 passed, 2 not applicable (...)`).
"""

from __future__ import annotations

import itertools
import uuid

import pytest
import requests

from bench.tools import BenchNoop, BenchRead
from runs.tools.registry import get_tool
from runs.tools.testing import FAILED, NOT_APPLICABLE, PASSED, ContractSuite, System, report
from tests.git_upstream import GIT_CONNECTOR, git, make_repository
from tests.registry import connector_tools
from tests.sandbox.support import TIMEOUT, effects
from tests.smtp import Mailbox, connector_file, smtp_server

SANDBOX = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
WRITE_ONLY = {"read_only_needs_no_idempotency", "read_makes_no_effect"}
QUERY = {"query_finds_the_receipt", "query_of_an_unused_key_is_none"}
TWICE = {"same_call_twice_same_receipt", "same_call_twice_one_effect"}
NO_COUNTER = {"invalid_args_make_no_effect", "write_makes_one_effect", "read_makes_no_effect"}


def sandbox_system(sandbox_url: str, tool: str) -> System:
    """Fresh calls for one sandbox tool, and its effects as the sandbox's ledger counts them
    (a read's: every tool's, since a read must change nothing anywhere)."""
    numbers = itertools.count(1)

    def charge() -> str:
        """A charge to refund, made on the sandbox directly."""
        answer = requests.post(
            sandbox_url + "payments/charges",
            json={"customer": "cus_refunds", "amount_cents": 5000, "currency": "EUR"},
            headers={"Idempotency-Key": f"setup-{uuid.uuid4().hex}"},
            timeout=TIMEOUT,
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["receipt_id"]

    calls = {
        "ticket.lookup": lambda: (f" Ticket-{next(numbers)} ", {}),
        "ticket.close": lambda: (f"ticket-{next(numbers)}", {"resolution": " fixed "}),
        "notify.send": lambda: (f"Contract-{next(numbers)}@Example.com", {"body": " hello "}),
        "payment.charge": lambda: (" cus_42 ", {"amount_cents": 1250, "currency": "eur"}),
        "payment.refund": lambda: (charge(), {"amount_cents": 500}),
    }
    ledger = {} if tool == "ticket.lookup" else {"tool": tool}
    return System(make_call=calls[tool], count_effects=lambda: len(effects(sandbox_url, **ledger)))


def names(outcome, kind: str) -> set[str]:
    return {result.name for result in outcome.named(kind)}


@SANDBOX
@pytest.mark.parametrize(
    ("tool", "not_applicable"),
    [
        ("ticket.lookup", {"write_makes_one_effect"} | QUERY | TWICE),
        ("ticket.close", WRITE_ONLY),
        ("notify.send", WRITE_ONLY | QUERY | TWICE),
        ("payment.charge", WRITE_ONLY),
        ("payment.refund", WRITE_ONLY),
    ],
)
def test_every_sandbox_tool_keeps_its_contract_against_the_sandbox(
    sandbox_url, tool, not_applicable
):
    outcome = ContractSuite(get_tool(tool), sandbox_system(sandbox_url, tool)).run()
    print(outcome.line())

    outcome.assert_passed()
    assert names(outcome, NOT_APPLICABLE) == not_applicable
    assert len(outcome.named(PASSED)) == len(ContractSuite.CHECKS) - len(not_applicable)


def test_the_benchmark_tools_keep_their_contract_and_say_what_went_unchecked():
    numbers = itertools.count(1)
    system = System(make_call=lambda: (f"item-{next(numbers)}", {"n": 1}))

    noop = ContractSuite(BenchNoop(), system).run()
    read = ContractSuite(BenchRead(), system).run()
    print("\n".join(report([noop, read])))

    noop.assert_passed()
    read.assert_passed()
    never_twice = {"same_call_twice_one_effect"}
    assert (
        names(noop, NOT_APPLICABLE) == {"read_only_needs_no_idempotency"} | NO_COUNTER | never_twice
    )
    assert names(read, NOT_APPLICABLE) == NO_COUNTER | never_twice
    # Their effect is nothing, so both answer a query by key (a killed batch settles by query).
    assert names(noop, PASSED) & names(read, PASSED) >= QUERY
    assert "invalid_args_make_no_effect: no effect counter given" in noop.line()


def test_an_mcp_tool_keeps_its_contract_against_mcp_server_git(tmp_path):
    repository = make_repository(tmp_path / "repository")
    tools = {tool.name: tool for tool in connector_tools(tmp_path, GIT_CONNECTOR)}
    numbers = itertools.count(1)
    system = System(
        make_call=lambda: (str(repository), {"branch_name": f"contract-{next(numbers)}"}),
        count_effects=lambda: len(git(repository, "branch", "--list").split("\n")),
    )

    outcome = ContractSuite(tools["git.branch"], system).run()
    print(outcome.line())

    outcome.assert_passed()
    assert names(outcome, NOT_APPLICABLE) == WRITE_ONLY | QUERY | TWICE
    assert "write_makes_one_effect" in names(outcome, PASSED)


def test_an_smtp_tool_keeps_its_contract_against_a_real_smtp_server(tmp_path):
    mailbox = Mailbox()
    numbers = itertools.count(1)
    system = System(
        make_call=lambda: (f"ops-{next(numbers)}@example.com", {"subject": "s", "body": "b"}),
        count_effects=lambda: len(mailbox.messages),
    )
    with smtp_server(mailbox) as port:
        (send,) = connector_tools(tmp_path, connector_file(port))
        outcome = ContractSuite(send, system).run()
    print(outcome.line())

    outcome.assert_passed()
    assert names(outcome, NOT_APPLICABLE) == WRITE_ONLY | QUERY | TWICE
    assert "invalid_args_make_no_effect" in names(outcome, PASSED)


# The suite must catch a tool that breaks its contract.

LIAR = """
[connectors.liar]
kind = "http"
base_url = "${COUNTERSIGN_SANDBOX_URL}"

[connectors.liar.tools.send]
# The sandbox's notifier, declared as if it deduplicated and could be queried by key.
contract_version = "v1"
effect_class = "idempotent"
target_schema = { type = "string", maxLength = 254 }
path = "notifications"
body = { recipient = "{target}", body = "{args.body}" }
idempotency_header = "Idempotency-Key"
receipt = { id = "{/receipt_id}", status = "{/status}" }

[connectors.liar.tools.send.args_schema]
type = "object"
properties = { body = { type = "string", minLength = 1 } }
required = ["body"]
additionalProperties = false

[connectors.liar.tools.send.query]
path = "receipts/{key}"
absent = { status = 404, pointer = "/type", equals = "not_found" }
"""


@SANDBOX
def test_a_connector_that_claims_to_dedupe_and_query_a_system_that_cannot_fails(
    sandbox_url, tmp_path
):
    (liar,) = connector_tools(tmp_path, LIAR, environ={"COUNTERSIGN_SANDBOX_URL": sandbox_url})
    numbers = itertools.count(1)
    system = System(
        make_call=lambda: (f"liar-{next(numbers)}@example.com", {"body": "hi"}),
        count_effects=lambda: len(effects(sandbox_url, tool="notify.send")),
    )

    outcome = ContractSuite(liar, system).run()

    assert names(outcome, FAILED) == {"query_finds_the_receipt"} | TWICE
    assert "the same call twice made 2 effects, not 1" in outcome.line()
    with pytest.raises(AssertionError, match=r"liar\.send v1 breaks its contract"):
        outcome.assert_passed()


class Drifting(BenchNoop):
    """Its normal form is not normal: every normalization appends again."""

    name = "lying.drift"

    def prepare_target(self, target: str) -> str:
        return target.strip() + "-x"


class Reckless(BenchNoop):
    """Declares a resend after an uncertain outcome safe, though nothing dedupes it."""

    name = "lying.reckless"
    dedupes_by_key = False
    effect_class = "not_retriable"
    retry_after_uncertain_allowed = True


def test_a_normal_form_that_changes_when_normalized_again_fails():
    system = System(make_call=lambda: ("item-1", {}))

    outcome = ContractSuite(Drifting(), system).run()

    assert {"normalize_is_idempotent", "execute_returns_a_receipt"} <= names(outcome, FAILED)
    assert "normalizing ('item-1-x', {}) again gives ('item-1-x-x', {})" in outcome.line()


def test_a_resend_after_an_uncertain_outcome_without_deduplication_fails():
    system = System(make_call=lambda: ("item-1", {}))

    outcome = ContractSuite(Reckless(), system).run()

    assert names(outcome, FAILED) == {"flags_are_consistent"}
    assert "yet allows a resend after an uncertain outcome" in outcome.line()


@pytest.mark.django_db
def test_against_a_system_that_cannot_be_reached_invalid_args_are_still_refused_before_sending(
    unreachable_sandbox,
):
    numbers = itertools.count(1)
    system = System(make_call=lambda: (f"ticket-{next(numbers)}", {}), timeout=(0.5, 0.5))

    outcome = ContractSuite(get_tool("ticket.close"), system).run()

    assert {
        "flags_are_consistent",
        "normalize_is_idempotent",
        "invalid_args_are_refused",
    } <= names(outcome, PASSED)
    assert "execute_returns_a_receipt: TransientError" in outcome.line()
    assert names(outcome, FAILED) == {"execute_returns_a_receipt"} | QUERY | {
        "same_call_twice_same_receipt"
    }
