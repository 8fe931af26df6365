"""The MCP gateway keeps the agent API's size limits (runs.limits): the same function
refuses, with the same words, and nothing is written."""

from __future__ import annotations

from control.api_kit.limits import process_long_polls
from runs import limits
from runs.gateway.sessions import session_run
from runs.models import Action, McpSession, Run
from tests.gateway.conftest import call


def test_start_run_past_the_goal_limit_is_refused_naming_it_and_keeps_the_sessions_run(
    caller, read_tool
):
    before = session_run(caller).pk
    runs = Run.objects.count()

    refused = call(caller, "countersign_start_run", {"goal": "g" * (limits.GOAL_MAX_CHARS + 1)})
    kept = call(caller, "countersign_start_run", {"goal": "g" * limits.GOAL_MAX_CHARS})

    assert refused.is_error
    assert refused.content[0].text.startswith("goal is 2001 characters; the limit is 2000")
    assert not kept.is_error
    assert Run.objects.count() == runs + 1
    assert (
        McpSession.objects.get().run_id
        == Run.objects.get(pk=kept.structured_content["run_id"]).pk
        != before
    )


def test_countersign_wait_keeps_the_processs_long_poll_cap(caller, counted_write, settings):
    settings.COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS = 1
    written = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 1}})
    action_id = written.structured_content["action_id"]

    # Another request of this process holds its only long-poll slot.
    with process_long_polls.held(30):
        refused = call(caller, "countersign_wait", {"action_id": action_id, "timeout_s": 1})

    assert refused.is_error
    assert "this server process already has 1 long-polls waiting" in refused.content[0].text
    assert process_long_polls.waiting == 0


def test_an_mcp_write_past_the_tokens_waiting_requests_is_refused_and_writes_nothing(
    caller, counted_write, settings
):
    settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS = 1
    first = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 1}})
    call(caller, "countersign_start_run", {"goal": "the next deploy"})
    actions = Action.objects.count()

    refused = call(caller, "counted.write", {"target": "deploy-8", "args": {"n": 2}})

    assert not first.is_error
    assert refused.is_error
    assert "already has 1 requests waiting for approval" in refused.content[0].text
    assert Action.objects.count() == actions
