"""End to end through the MCP gateway: an MCP client (the official SDK over HTTP) asks for a
`git_commit` of the reference mcp-server-git behind an `mcp` connector, gets pending_approval,
an operator approves it in the browser, a real RQ worker makes the commit, countersign_wait
returns the receipt; the same call again returns the same receipt and the repository still
has one commit. The session's transcript is saved to test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from control.services import api_token_create
from runs.models import Action
from tests.browser.conftest import ARTIFACTS, log_in, screenshot
from tests.factories import make_tenant, make_user
from tests.git_upstream import commits, make_repository, stage_file
from tests.mcp_client import Transcript, over_http

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_mcp_client_gets_the_receipt_of_a_commit_approved_in_the_browser(
    page, live_server, git_workers, tmp_path
):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    _, token = api_token_create(tenant=tenant, name="desktop", actor="tests")
    repository = make_repository(tmp_path / "repo")
    stage_file(repository, "release-notes.txt")
    url = live_server.url + "/mcp/"
    transcript = Transcript()
    commit = {"target": str(repository), "args": {"message": "Add the release notes"}}

    def over_mcp(scenario):
        return over_http(url, token, scenario, transcript=transcript, client_name="Desktop")

    async def ask(client):
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert listed["git.commit"].annotations.read_only_hint is False
        assert "countersign_wait" in listed
        return (await client.call_tool("git.commit", commit)).structured_content

    asked = over_mcp(ask)

    assert asked["status"] == "pending_approval"
    action = Action.objects.get()
    assert (asked["action_id"], asked["intent_digest"]) == (str(action.pk), action.intent_digest)
    assert commits(repository) == ["initial"]
    assert not action.attempts.exists()

    log_in(page, "olivia")
    item = page.locator(f"#action-{action.pk}")
    expect(item).to_contain_text("git.commit")
    expect(item).to_contain_text("Add the release notes")
    screenshot(page, "mcp-commit-in-the-inbox")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(item.locator(".outcome")).to_contain_text("Approved. Queued for a worker.")
    assert git_workers.run_burst() == 0

    async def wait_then_ask_again(client):
        waited = await client.call_tool(
            "countersign_wait", {"action_id": asked["action_id"], "timeout_s": 10}
        )
        again = await client.call_tool("git.commit", commit)
        return waited.structured_content, again.structured_content

    waited, again = over_mcp(wait_then_ask_again)

    action.refresh_from_db()
    assert waited["status"] == "executed"
    assert waited["receipt"]["receipt_id"] == action.receipt.receipt_id
    assert again["receipt"] == waited["receipt"]
    assert again["action_id"] == asked["action_id"]
    assert commits(repository) == ["Add the release notes", "initial"]
    assert Action.objects.count() == 1
    assert action.attempts.count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "mcp-session-transcript.txt").write_text(transcript.text())
