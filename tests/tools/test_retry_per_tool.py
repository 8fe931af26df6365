"""A tool's own retry limits win over the worker's defaults: a tool that allows two attempts
waits for an operator after two transient failures, where the default allows five."""

from __future__ import annotations

import pytest

from runs.execution.worker import process_action
from runs.models import Action
from runs.services import lease_claim
from runs.tools.retry import DEFAULT_POLICY
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.registry import connector_tools, registered

pytestmark = pytest.mark.django_db

# The ticket desk's close, declared with a short retry window of its own.
IMPATIENT_CLOSE = """
[connectors.ticket]
kind = "http"
base_url = "${COUNTERSIGN_SANDBOX_URL}"

[connectors.ticket.tools.close_impatiently]
contract_version = "v1"
effect_class = "idempotent"
target_schema = { type = "string", pattern = "^ticket-[1-9][0-9]{0,8}$" }
path = "tickets/{target}/close"
body = { args = "{args}" }
idempotency_header = "Idempotency-Key"
receipt = { id = "{/receipt_id}", digest = "{/intent_digest}", key = "{/idempotency_key}" }
retry = { max_attempts = { transient = 2 }, base_delay = 0.0, max_delay = 0.0 }

[connectors.ticket.tools.close_impatiently.args_schema]
type = "object"
properties = { resolution = { type = "string" } }
additionalProperties = false
"""


def run_once(action: Action) -> None:
    lease = lease_claim(run_id=action.run_id, owner="worker")
    process_action(action_pk=action.pk, lease=lease, worker="worker")
    action.refresh_from_db()


@pytest.fixture
def impatient_tool(external, tmp_path, settings):
    environ = {"COUNTERSIGN_SANDBOX_URL": settings.SANDBOX_URL}
    [tool] = connector_tools(tmp_path, IMPATIENT_CLOSE, environ=environ)
    with registered(tool):
        yield tool


def test_a_tools_retry_policy_ends_its_window_before_the_default_would(external, impatient_tool):
    assert DEFAULT_POLICY.attempts_allowed("transient") > 2
    external.answer(503, {"detail": "the desk is down"})
    tenant = make_tenant()
    action = make_action(make_run(tenant), tool=impatient_tool.name, target="ticket-51")
    approve(action, make_user(tenant, "operator"))

    run_once(action)
    assert (action.status, action.attempt_count) == ("retry_wait", 1)
    run_once(action)

    assert (action.status, action.attempt_count) == ("needs_attention", 2)
    writes = [request for request in external.requests if request[0] == "POST"]
    assert len(writes) == 2
    assert {headers["Idempotency-Key"] for _, _, headers, _ in writes} == {action.idempotency_key}
