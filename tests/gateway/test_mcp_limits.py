"""The MCP gateway keeps the agent API's size limits (runs.limits): the same function
refuses, with the same words, and nothing is written."""

from __future__ import annotations

from runs import limits
from runs.gateway.sessions import session_run
from runs.models import McpSession, Run
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
