"""The tools page: the catalog an agent reads at GET /api/v1/tools, for operators and admins."""

from __future__ import annotations

import html
import re
from typing import Any, ClassVar

import pytest
from django.test import Client
from django.urls import reverse

from control.services import api_token_create
from runs.services import tool_policy_set
from runs.tools.base import Tool
from runs.tools.errors import UnsupportedTool
from tests.factories import make_user
from tests.pages.conftest import client_for
from tests.registry import registered

pytestmark = pytest.mark.django_db

SANDBOX_TOOLS = ("ticket.lookup", "ticket.close", "notify.send", "payment.charge", "payment.refund")


class Quote(Tool):
    """A tool of no system: it echoes no digest."""

    name = "stand.quote"
    needs_approval = True
    dedupes_by_key = False
    queryable_by_key = False
    effect_class = "not_retriable"
    retry_after_uncertain_allowed = False
    echoes_digest = False
    description = "Quotes its arguments back."
    target_schema: ClassVar[dict[str, Any]] = {"type": "string"}
    args_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False}

    def execute(self, call, *, timeout):
        raise UnsupportedTool("a stand-in for the catalog: never executed")


class QuoteByKey(Quote):
    name = "stand.quote"
    contract_version = "v2"
    dedupes_by_key = True
    description = "Quotes <b>everything</b> back, once per key."


def api_catalog(tenant) -> list[dict[str, Any]]:
    _, token = api_token_create(tenant=tenant, name="catalog", actor="tests")
    response = Client().get("/api/v1/tools", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    return response.json()


def card(page: str, name: str, version: str = "v1") -> str:
    """The tool's card on the page, unescaped, its tags turned into spaces."""
    anchor = f"tool-{name.replace('.', '-')}-{version}"
    found = re.search(rf'<article [^>]*id="{re.escape(anchor)}".*?</article>', page, re.S)
    assert found, f"no card for {name} {version}"
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(0))))


def fact(text: str, label: str) -> str:
    found = re.search(rf"{re.escape(label)} (\S+( · \S+)?)", text)
    assert found, f"no {label!r} in {text!r}"
    return found.group(1)


def set_needs_approval(tenant, tool: str, needs_approval: bool) -> None:
    tool_policy_set(
        tenant=tenant,
        tool=tool,
        needs_approval=needs_approval,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=600,
        actor="tests",
    )


def test_the_page_shows_what_the_api_shows_for_every_tool(operator_client, tenant):
    set_needs_approval(tenant, "notify.send", False)

    page = operator_client.get(reverse("tool_list")).content.decode()

    catalog = api_catalog(tenant)
    assert {tool["name"] for tool in catalog} >= set(SANDBOX_TOOLS)
    for tool in catalog:
        text = card(page, tool["name"], tool["contract_version"])
        assert fact(text, "Connector") == f"{tool['connector']} · {tool['kind']}"
        assert fact(text, "Contract version") == tool["contract_version"]
        assert fact(text, "Effect class") == tool["effect_class"]
        assert fact(text, "Needs approval") == ("yes" if tool["needs_approval"] else "no")
        assert fact(text, "Dedupes by key") == ("yes" if tool["dedupes_by_key"] else "no")
        assert fact(text, "Queryable by key") == ("yes" if tool["queryable_by_key"] else "no")
        assert ", ".join(tool["capabilities"]).capitalize() in text
        assert tool["description"] in text
    assert fact(card(page, "notify.send"), "Needs approval") == "no"
    assert fact(card(page, "ticket.close"), "Needs approval") == "yes"


def test_each_card_says_its_connector_capabilities_and_proof_in_words(operator_client):
    page = operator_client.get(reverse("tool_list")).content.decode()

    close = card(page, "ticket.close")
    assert "ticket · http" in close
    assert "Dedupes by key, can be queried by key." in close
    assert "Proof of a receipt the digest, echoed" in close
    send = card(page, "notify.send")
    assert "A resend is a second effect, cannot be queried." in send
    assert "Not retriable: a resend is a second message." in send
    lookup = card(page, "ticket.lookup")
    assert "Read only: changes nothing." in lookup
    assert "Proof of a receipt none needed: a read changes nothing" in lookup
    assert "Undone by payment.refund" in card(page, "payment.charge")


def test_the_schemas_are_folded_and_escaped_and_every_contract_version_is_listed(
    operator_client,
):
    with registered(Quote()), registered(QuoteByKey()):
        page = operator_client.get(reverse("tool_list")).content.decode()

    assert "<b>everything</b>" not in page
    assert "Quotes &lt;b&gt;everything&lt;/b&gt; back, once per key." in page
    quote, by_key = card(page, "stand.quote", "v1"), card(page, "stand.quote", "v2")
    assert (
        "A resend is a second effect, cannot be queried, the receipt's proof is the key alone."
        in quote
    )
    assert "Proof of a receipt the key alone" in quote
    assert "Dedupes by key, cannot be queried, the receipt's proof is the key alone." in by_key
    folded = re.search(
        r'id="tool-ticket-close-v1".*?<details>\s*<summary>Target schema</summary>\s*'
        r'<pre class="json small">(.*?)</pre>\s*</details>\s*<details>\s*'
        r"<summary>Arguments schema</summary>\s*<pre[^>]*>(.*?)</pre>",
        page,
        re.S,
    )
    assert folded
    assert "^ticket-[1-9][0-9]{0,8}$" in html.unescape(folded.group(1))
    assert '"additionalProperties": false' in html.unescape(folded.group(2))


@pytest.mark.usefixtures("noop_tool")
def test_a_python_tool_is_listed_with_its_kind(operator_client):
    page = operator_client.get(reverse("tool_list")).content.decode()

    noop = card(page, "bench.noop")
    assert fact(noop, "Connector") == "bench · python"
    assert "Dedupes by key, can be queried by key." in noop
    assert "Does nothing, once per key" in noop


def test_needs_approval_follows_the_policies_of_this_tenant_only(client, tenant, other_tenant):
    set_needs_approval(other_tenant, "ticket.close", False)
    set_needs_approval(tenant, "ticket.lookup", True)
    client_for(client, make_user(tenant, "admin"))

    page = client.get(reverse("tool_list")).content.decode()

    assert fact(card(page, "ticket.close"), "Needs approval") == "yes"
    assert fact(card(page, "ticket.lookup"), "Needs approval") == "yes"
    assert f'href="{reverse("tool_policies")}"' in page


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_operators_and_admins_find_it_in_the_navigation(client, tenant, role):
    client_for(client, make_user(tenant, role))

    page = client.get(reverse("run_list")).content.decode()
    here = client.get(reverse("tool_list")).content.decode()

    assert page.count(f'<a href="{reverse("tool_list")}"') == 1
    assert f'<a href="{reverse("tool_list")}" aria-current="page">Tools</a>' in here


@pytest.mark.parametrize("role", ["reconciler", "auditor"])
def test_other_roles_are_refused_as_on_the_other_operator_pages(client, tenant, role):
    client_for(client, make_user(tenant, role))

    response = client.get(reverse("tool_list"))
    runs = client.get(reverse("run_list")).content.decode()

    assert response.status_code == 403
    assert "This needs the admin or operator role" in response.content.decode()
    assert reverse("tool_list") not in runs


def test_nobody_logged_in_is_sent_to_the_login_page(client):
    response = client.get(reverse("tool_list"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_page_only_reads(operator_client):
    assert operator_client.post(reverse("tool_list")).status_code == 405


def test_each_operator_page_is_linked_once(client, tenant):
    client_for(client, make_user(tenant, "admin"))

    page = client.get(reverse("tool_list")).content.decode()

    nav = re.search(r'<nav class="mainnav".*?</nav>', page, re.S).group(0)
    labels = re.findall(r">([A-Z][a-z]+)</a>", nav)
    assert labels == ["Inbox", "Runs", "Tools", "Reconciliation", "Receipts", "Audit", "Policies"]
