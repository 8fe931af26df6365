"""A tool's summary: one intent's sentence, money written by its currency's minor unit, and a
template refused when it names what the intent will not have."""

from __future__ import annotations

import pytest

from runs.models import Plan
from runs.selectors import PlanSummary
from runs.services.plan_summaries import plan_summary_of
from runs.tools.connectors.fields import ConnectorError
from runs.tools.summaries import SummaryError, check, money, money_fields, render
from tests.registry import connector_tools
from tests.tools.test_connector_files import GOOD_TOOL, desk

ARGS_SCHEMA = {
    "type": "object",
    "properties": {
        "amount_cents": {"type": "integer"},
        "currency": {"type": "string"},
        "body": {"type": "string"},
        "note": {"type": "string"},
    },
}
CHARGE = "Charge {args.amount_cents|money:args.currency} to {target}"


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (5_000_000, "EUR", "50,000.00 EUR"),
        (1250, "JPY", "1,250 JPY"),
        (1250, "KWD", "1.250 KWD"),
        (1250, "eur", "12.50 EUR"),
        (5, "USD", "0.05 USD"),
        (-1999, "EUR", "-19.99 EUR"),
        (12.5, "EUR", "12.5 EUR (not a whole number of minor units)"),
        (True, "EUR", "True EUR (not a whole number of minor units)"),
        (100, "euro", "100 in minor units of 'euro' (not an ISO 4217 code)"),
        (100, None, "100 in minor units of None (not an ISO 4217 code)"),
    ],
)
def test_money_is_written_by_the_currencys_minor_unit_or_as_given(amount, currency, shown):
    assert money(amount, currency) == shown


def test_a_summary_fills_the_intents_values():
    args = {"amount_cents": 5_000_000, "currency": "EUR"}
    assert render(CHARGE, tool="payment.charge", target="cus_42", args=args) == (
        "Charge 50,000.00 EUR to cus_42"
    )
    fixed = "Refund {args.amount_cents|money:JPY} on {tool}"
    assert render(fixed, tool="payment.refund", target="x", args=args) == (
        "Refund 5,000,000 JPY on payment.refund"
    )


def test_a_long_value_is_shortened_an_absent_one_says_so_and_braces_stay_braces():
    template = "Send {{{target}}} {args.body} ({args.note})"
    said = render(template, tool="notify.send", target="ops", args={"body": "x" * 100})
    assert said == "Send {ops} " + "x" * 59 + "… ((none))"


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("Close {ticket}", "unknown placeholder {ticket}"),
        ("Close {args.resolution}", "{args.resolution} names no argument of args_schema"),
        ("Pay {args.amount_cents|euros}", "unknown filter |euros"),
        ("Pay {args.amount_cents|money}", "|money needs its currency"),
        ("Pay {args.amount_cents|money:args.cur}", "{args.cur} names no argument"),
        ("Close {target", "unbalanced brace"),
    ],
)
def test_a_summary_that_names_what_the_intent_lacks_is_refused(template, words):
    with pytest.raises(SummaryError, match=words.replace("|", r"\|").replace("{", r"\{")):
        check(template, ARGS_SCHEMA)


def test_the_money_fields_are_read_from_the_template():
    assert money_fields(CHARGE) == {"amount_cents": "args.currency"}
    assert money_fields("Refund {args.amount_cents|money:EUR}") == {"amount_cents": "EUR"}
    assert money_fields("Close {target}") == {}


def test_a_connector_file_refuses_a_bad_summary_by_its_field(tmp_path):
    with pytest.raises(ConnectorError) as caught:
        connector_tools(tmp_path, desk(GOOD_TOOL + 'summary = "Close {target} for {args.who}"\n'))
    message = str(caught.value)
    assert "tool 'close'" in message
    assert "field 'summary'" in message
    assert "{args.who} names no argument of args_schema" in message


def test_a_summary_is_words_for_people_not_part_of_what_the_tool_means(tmp_path):
    [plain] = connector_tools(tmp_path, desk())
    [summarized] = connector_tools(tmp_path, desk(GOOD_TOOL + 'summary = "Close {target}"\n'))
    assert summarized.summarize(target="item-7", args={}) == "Close item-7"
    assert plain.summarize(target="item-7", args={}) == ""
    assert summarized.definition_digest() == plain.definition_digest()
    assert summarized.describe()["summary"] == "Close {target}"


def test_a_plans_money_is_added_up_by_currency_never_across(settings):
    settings.SANDBOX_ENABLED = True
    charge = ("payment.charge", "v1")
    summary = plan_summary_of(
        [
            (*charge, "cus_1", {"amount_cents": 150_000, "currency": "EUR"}),
            (*charge, "cus_2", {"amount_cents": 2_500, "currency": "EUR"}),
            (*charge, "cus_3", {"amount_cents": 1_250, "currency": "JPY"}),
        ]
    )
    assert summary["money"] == {"amount_cents": {"EUR": "152500", "JPY": "1250"}}
    assert "amount_cents" not in summary["totals"]


def test_a_plan_amount_that_is_not_whole_minor_units_is_said_so_and_never_added(settings):
    """payment.charge's schema allows integers only; a tool whose schema allows numbers
    can send 12.5: the card says so rather than add it in."""
    settings.SANDBOX_ENABLED = True
    summary = plan_summary_of(
        [
            ("payment.charge", "v1", "cus_1", {"amount_cents": 1000, "currency": "EUR"}),
            ("payment.charge", "v1", "cus_2", {"amount_cents": 12.5, "currency": "EUR"}),
        ]
    )
    assert summary["money"] == {"amount_cents": {"?": "0", "EUR": "1000"}}
    plan = Plan(summary=summary)
    [(name, total)] = PlanSummary(plan).money_totals
    assert name == "amount_cents"
    assert total == (
        "10.00 EUR · and amounts that are not whole minor units of a currency (not added)"
    )
