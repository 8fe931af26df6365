"""The target as it is now, beside what the write will do: a card's "Read it now".

Where the tool can read its target (a ticket's status, a charge's refunds so far), the person
deciding asks for a read and sees the state next to the frozen intent, and is told when the
write's goal already holds ("ticket-7 is already closed": the worker will record the read
instead of writing). The read is asked for, never made on every refresh of the inbox: it is
a call to the external system, bounded by the tool's read timeout, and it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from control.web.pages import INBOX_READER_ROLES, TenantRequest, pretty_json, tenant_member
from runs import selectors
from runs.models import Action
from runs.tools import errors as tool_errors
from runs.tools.retry import DEFAULT_POLICY


@dataclass(frozen=True)
class TargetNow:
    action: Action
    state: Any = None
    problem: str = ""
    holds: bool = False
    offers_read: bool = True

    @property
    def state_json(self) -> str:
        return pretty_json(self.state)


def target_now(action: Action) -> TargetNow:
    try:
        tool = selectors.tenant_tool(
            tenant=action.tenant, name=action.tool, contract_version=action.contract_version
        )
    except tool_errors.UnsupportedTool as error:
        return TargetNow(action, problem=str(error))
    try:
        with tool.contained():
            state = tool.read(action.target, timeout=DEFAULT_POLICY.call_timeout)
    except tool_errors.ToolError as error:
        return TargetNow(action, problem=f"{error.error_class}: {error}")
    if state is None:
        return TargetNow(action, offers_read=False)
    holds = tool.can_be_satisfied() and tool.is_satisfied(
        target=action.target, args=action.args, state=state
    )
    return TargetNow(action, state=state, holds=holds)


@require_GET
@tenant_member(*INBOX_READER_ROLES)
def inbox_target_now(request: TenantRequest, action_pk) -> HttpResponse:
    action = selectors.action_by_id(action_pk, tenant=request.tenant)
    if action is None:
        raise Http404("No such request in this tenant.")
    context = {"now": target_now(action), "read_at": timezone.now()}
    template = "runs/_target_now.html" if request.htmx else "runs/target_now.html"
    return render(request, template, context)
