"""The agent's JSON API under /api/v1 (control.api mounts its two routers).

Rooms: `routing` (the routers, the rules each view is registered under, the tenant-scoped
lookups), `runs` (runs, observations, actions, tools, checkpoints), `plans`, `asking` (the
cancel's query by key, before its POST transaction), `bodies` (the response bodies),
`schemas` (request and response shapes). What the MCP gateway shares with it is
runs.agent_fields. Every endpoint reads through the token's tenant and changes state only
through runs.services; operationIds are a contract and stay as they were.
"""

# The views register on the routers as their modules load.
from __future__ import annotations

from runs.api import plans, runs  # noqa: F401
from runs.api.routing import plans_router, router

__all__ = ["plans_router", "router"]
