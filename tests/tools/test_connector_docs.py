"""docs/CONNECTORS.md cannot rot: every TOML example on it loads (with the variables it names
set), the tools it defines say what the page says they say, and the python connector's example
class passes the contract test the page shows for it."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator

import pytest

from runs.pages.presenters import ToolText
from runs.tools.calls import ToolReceipt
from runs.tools.testing import PASSED, ContractSuite, System
from tests.connector_docs import DOC, EXAMPLES, ROOT, blocks, connector_of, load, python_block

SANDBOX_DATABASES = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
PAGE_MODULES = ("journal_connector", "billing_connector")


@pytest.fixture
def page_modules() -> Iterator[dict[str, types.ModuleType]]:
    """The page's python connector modules, importable under their names."""
    modules = {}
    for name in PAGE_MODULES:
        module = types.ModuleType(name)
        exec(compile(python_block(f"# {name}.py"), f"{DOC}:{name}", "exec"), module.__dict__)
        sys.modules[name] = modules[name] = module
    yield modules
    for name in PAGE_MODULES:
        del sys.modules[name]


def test_the_page_shows_every_kind_of_example():
    assert [connector_of(text) for text in EXAMPLES] == [
        "files",
        "payments",
        "github",
        "journal",
        "billing",
        "git",
        "mail",
        "tickets",
    ]
    for kind in ("http", "python", "mcp", "smtp"):
        assert f"\n## The {kind} kind\n" in DOC.read_text()


@pytest.mark.usefixtures("page_modules")
@pytest.mark.parametrize("text", EXAMPLES, ids=[connector_of(text) for text in EXAMPLES])
def test_every_toml_example_loads(text, tmp_path):
    tools = load(text, tmp_path)

    assert tools
    assert {name.split(".")[0] for name, _ in tools} == {connector_of(text)}


def test_the_readmes_example_loads_as_the_tool_it_describes(tmp_path):
    (readme,) = blocks("toml", ROOT / "README.md")
    (close,) = load(readme, tmp_path).values()
    assert (close.name, close.effect_class, close.dedupes_by_key) == (
        "desk.close",
        "idempotent",
        True,
    )


def test_the_payment_example_dedupes_queries_proves_the_digest_and_refunds(tmp_path):
    (payments,) = [text for text in EXAMPLES if connector_of(text) == "payments"]
    tools = load(payments, tmp_path)
    charge = tools[("payments.charge", "v1")]

    assert str(ToolText("payments.charge", charge)) == (
        "payments · http — dedupes by key, can be queried by key, undone by payments.refund"
    )
    assert charge.echoes_digest
    assert charge.normalize(target=" cus_42 ", args={"amount": 500, "currency": " EUR"}) == (
        "cus_42",
        {"amount": 500, "currency": "eur"},
    )
    receipt = ToolReceipt(
        idempotency_key="run:charge:cus_42:v1",
        intent_digest="sha256:" + "a" * 64,
        receipt_id="ch_3Nx",
        target_version=None,
        status="succeeded",
        raw_response_hash="sha256:" + "b" * 64,
    )
    target, args = charge.compensation_call(
        receipt=receipt, args={"amount": 500, "currency": "eur"}
    )
    refund = tools[("payments.refund", "v1")]
    assert refund.normalize(target=target, args=args) == ("ch_3Nx", {"amount": 500})
    # Stripe cannot search refunds, as the page says: deduplicated by key, never queried.
    assert (refund.dedupes_by_key, refund.queryable_by_key) == (True, False)
    assert (charge.request.body_encoding, refund.request.body_encoding) == ("form", "form")


def test_the_issue_example_says_what_having_no_idempotency_key_means(tmp_path):
    (github,) = [text for text in EXAMPLES if connector_of(text) == "github"]
    tools = load(github, tmp_path)
    comment, close = tools[("github.comment", "v1")], tools[("github.close", "v1")]

    assert comment.capabilities() == [
        "a resend is a second effect",
        "cannot be queried",
        "the receipt's proof is the key alone",
    ]
    assert not comment.retry_after_uncertain_allowed
    assert close.capabilities()[0] == "a resend changes nothing more"
    assert close.is_satisfied(target="7", args={}, state={"number": 7, "state": "closed"})


def test_the_version_example_defines_two_versions_of_one_tool(tmp_path):
    (tickets,) = [text for text in EXAMPLES if connector_of(text) == "tickets"]

    assert set(load(tickets, tmp_path)) == {("tickets.close", "v1"), ("tickets.close", "v2")}


def test_the_journal_example_passes_the_contract_test_the_page_shows(
    page_modules, tmp_path, capsys
):
    (journal,) = [text for text in EXAMPLES if connector_of(text) == "journal"]
    (tool,) = load(journal, tmp_path).values()
    assert isinstance(tool, page_modules["journal_connector"].JournalEntry)
    source = python_block("# tests/test_journal_connector.py")
    namespace: dict = {}
    exec(compile(source, f"{DOC}:test_journal_connector", "exec"), namespace)

    namespace["test_the_journal_keeps_the_tool_contract"](tmp_path)

    claimed = re.search(r"print\(outcome\.line\(\)\)  # (.*) \(\.\.\.\)", source).group(1)
    assert capsys.readouterr().out.startswith(claimed + " (")


@SANDBOX_DATABASES
def test_the_http_python_example_keeps_its_contract_against_the_sandbox(
    page_modules, sandbox_url, tmp_path
):
    (billing,) = [text for text in EXAMPLES if connector_of(text) == "billing"]
    # BILLING_URL: the sandbox's JSON payment API, which deduplicates by Idempotency-Key.
    (tool,) = load(billing, tmp_path, BILLING_URL=sandbox_url + "payments").values()
    system = System(make_call=lambda: ("cus_42", {"amount_cents": 1250, "currency": "EUR"}))

    outcome = ContractSuite(tool, system).run()

    outcome.assert_passed()
    assert {result.name for result in outcome.named(PASSED)} >= {
        "execute_returns_a_receipt",
        "same_call_twice_same_receipt",
        "invalid_args_are_refused",
    }
