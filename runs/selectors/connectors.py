"""Which connectors a tenant may reach, and its tools looked up through that.

Every path that reaches an external system for a tenant (the catalog, a proposal, the
gateway's reads, the worker's reads and sends, the reconciliation probes) asks
`tenant_tool`, never the registry alone: a tool of a connector the tenant has not enabled
is refused with ConnectorNotEnabled (an UnsupportedTool), which each path already treats as
"nothing may be sent with it".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from control.models import Tenant
from runs.models import ConnectorEnablement
from runs.record.signed_rows import ENABLEMENT_ROWS
from runs.tools.base import Tool
from runs.tools.errors import ConnectorNotEnabled
from runs.tools.registry import all_tools, get_tool

logger = logging.getLogger(__name__)

# connector name -> may its read_only tools run without a person (reads_without_approval)
Enabled = Mapping[str, bool]


def connectors_enabled(*, tenant: Tenant) -> dict[str, bool]:
    """The tenant's enabled connectors, each with reads_without_approval (one query). A row
    that does not verify (written around runs.services.connectors) enables nothing."""
    rows = ConnectorEnablement.objects.filter(tenant=tenant)
    return {row.connector: row.reads_without_approval for row in rows if _verifies(row)}


def connectors_enabled_for(tenant_ids: Iterable) -> dict[tuple, bool]:
    """(tenant id, connector) -> reads_without_approval for several tenants (one query)."""
    rows = ConnectorEnablement.objects.filter(tenant_id__in=set(tenant_ids))
    return {
        (row.tenant_id, row.connector): row.reads_without_approval for row in rows if _verifies(row)
    }


def _verifies(row: ConnectorEnablement) -> bool:
    problem = ENABLEMENT_ROWS.problem(row)
    if problem:
        logger.warning(
            "connector %s for tenant %s does not verify (%s): it enables nothing",
            row.connector,
            row.tenant_id,
            problem,
        )
    return not problem


def known_connectors() -> set[str]:
    """Every connector this server has a tool of (ConnectorError if a file is unusable)."""
    return {tool.connector for tool in all_tools()}


def tenant_tool(
    *,
    tenant: Tenant,
    name: str,
    contract_version: str | None = None,
    enabled: Enabled | None = None,
) -> Tool:
    """The adapter for name at contract_version, if its connector is enabled for tenant;
    UnsupportedTool if the server has no such tool, ConnectorNotEnabled if the tenant may
    not use it. `enabled`: the tenant's connectors_enabled, when the caller has them."""
    tool = get_tool(name, contract_version)
    if enabled is None:
        enabled = connectors_enabled(tenant=tenant)
    if tool.connector not in enabled:
        raise ConnectorNotEnabled(tool=tool.name, connector=tool.connector, tenant=tenant.name)
    return tool


def default_needs_approval(tool: Tool, *, reads_without_approval: bool) -> bool:
    """Whether the tool needs a person for a tenant that set no policy of its own: what the
    tool declares, except that a read_only tool needs one unless the tenant let its
    connector's reads run without approval."""
    if tool.effect_class == "read_only" and not reads_without_approval:
        return True
    return tool.needs_approval
