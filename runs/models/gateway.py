"""MCP sessions: which run an MCP client's calls belong to (runs.gateway)."""

from __future__ import annotations

import uuid

from django.db import models

from control.models import ApiToken, Tenant
from runs.models.runs import Run


class McpSession(models.Model):
    """One MCP client of one token, and the run its calls belong to.

    `key` names the client as the wire lets us: the session id the gateway handed out at
    `initialize` (handshake-era clients), else the client's name from the request's metadata
    (sessionless 2026-07-28 clients), else the token alone. A session starts its run at its
    first call and starts another when that run has ended (or on countersign_start_run)."""

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
