"""A batch's calls to a connector that allows N go out N at once, never more; a connector
that allows 1 gets them one after another. A tool counts the calls it has open."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest

from runs.execution.drain import drain
from runs.models import Action
from runs.record.verification import run_verify
from runs.tools.base import Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.registry import register_tool, unregister_tool
from runs.tools.schema import DRAFT_2020_12
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True)


class CountingDesk(Tool):
    """Closes anything, once per key, holding each call open briefly and counting how many
    are open at once (a desk that dedupes and can be queried, so its sends are batched)."""

    name = "desk.close"
    needs_approval = True
    dedupes_by_key = True
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True
    target_schema: ClassVar[dict[str, Any]] = {"type": "string"}
    args_schema: ClassVar[dict[str, Any]] = {
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    lock = threading.Lock()
    open_calls = 0
    most_open = 0
    sent: ClassVar[list[str]] = []

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        cls = type(self)
        with cls.lock:
            cls.open_calls += 1
            cls.most_open = max(cls.most_open, cls.open_calls)
        time.sleep(0.2)
        with cls.lock:
            cls.open_calls -= 1
            cls.sent.append(call.idempotency_key)
        return self._receipt(call.idempotency_key, call.intent_digest)

    def query(self, idempotency_key: str, *, timeout: Timeout, intent_digest=None):
        if idempotency_key not in type(self).sent:
            return None
        return self._receipt(idempotency_key, intent_digest)

    def _receipt(self, key: str, digest: str | None) -> ToolReceipt:
        return ToolReceipt(
            idempotency_key=key,
            intent_digest=digest,
            receipt_id=f"closed-{key[-12:]}",
            target_version=None,
            status="closed",
            raw_response_hash="sha256:" + "0" * 64,
        )


@pytest.fixture
def desk_at(request):
    tool_class = type("Desk", (CountingDesk,), {"concurrency": request.param, "sent": []})
    tool = tool_class()
    register_tool(tool)
    yield tool_class
    unregister_tool(tool)


@pytest.mark.parametrize("desk_at", [3, 1], indirect=True, ids=["concurrency 3", "one by one"])
def test_a_batch_has_at_most_its_connectors_concurrency_of_calls_out(desk_at):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = []
    for number in range(7):
        action = make_action(make_run(tenant), tool="desk.close", target=f"item-{number}", args={})
        approve(action, operator)
        actions.append(action)

    assert drain(worker="concurrent-worker") == 7

    assert desk_at.most_open == desk_at.concurrency
    assert len(desk_at.sent) == 7 == len(set(desk_at.sent))
    for action in Action.objects.filter(pk__in=[a.pk for a in actions]).select_related("run"):
        assert action.status == "succeeded"
        assert run_verify(action.run) == []
