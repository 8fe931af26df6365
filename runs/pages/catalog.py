"""The tools page: every tool this server can execute, as GET /api/v1/tools shows it."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from control.foundation.tenancy import APPROVER_ROLES
from control.web.pages import tenant_member
from runs import selectors
from runs.pages.presenters import CatalogEntry

TOOLS = "runs/tool_list.html"


@require_GET
@tenant_member(*APPROVER_ROLES)
def tool_list(request: HttpRequest) -> HttpResponse:
    catalog = selectors.tool_catalog(tenant=request.tenant)
    return render(request, TOOLS, {"entries": [CatalogEntry(tool) for tool in catalog]})
