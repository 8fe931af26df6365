"""MCP sessions and agents: which run an MCP client's calls belong to, and which client it
is across sessions (runs.gateway)."""

from __future__ import annotations

import uuid

from django.db import models

from control.models import ApiToken, Tenant
from runs.models.runs import Run


class McpAgent(models.Model):
    """One MCP agent: a token plus the client's name (`clientInfo.name`, or the bridge's), the
    same across sessions and runs (DESIGN.md, Interfaces: "MCP agent identity"). Its row is
    locked while it proposes a write, so two sessions of one agent repeating a write at once
    still freeze one intent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    token = models.ForeignKey(ApiToken, on_delete=models.PROTECT, related_name="mcp_agents")
    client_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["token", "client_name"], name="mcp_agent_unique_client"
            ),
        ]

    def __str__(self) -> str:
        return f"MCP agent {self.client_name or '(unnamed)'} ({self.token.name})"


class McpAgentRun(models.Model):
    """A run the gateway started for an agent: the agent's writes are looked up through these
    across its sessions, and the sweep ends them when idle (COUNTERSIGN_MCP_IDLE_SECONDS)."""

    run = models.OneToOneField(
        Run, on_delete=models.PROTECT, primary_key=True, related_name="mcp_agent_run"
    )
    agent = models.ForeignKey(McpAgent, on_delete=models.PROTECT, related_name="runs")

    def __str__(self) -> str:
        return f"{self.run_id} of {self.agent}"


class McpSession(models.Model):
    """One MCP client of one token, and the run its calls belong to.

    `key` names the client as the wire lets us: the session id the gateway handed out at
    `initialize` (handshake-era clients), else the client's name from the request's metadata
    (sessionless 2026-07-28 clients), else the token alone. A session starts its run at its
    first call and starts another when that run has ended (or on countersign_start_run).
    `last_seen_at` moves with every tools/call: the idle sweep reads it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    token = models.ForeignKey(ApiToken, on_delete=models.PROTECT, related_name="mcp_sessions")
    key = models.CharField(max_length=300)
    client_name = models.CharField(max_length=200, blank=True)
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, null=True, blank=True, related_name="mcp_sessions"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="mcp_session_unique_key"),
        ]

    def __str__(self) -> str:
        return f"MCP {self.client_name or self.key} ({self.token.name})"
