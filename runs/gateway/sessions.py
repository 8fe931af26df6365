"""Who calls through the MCP gateway, and the run each MCP session's calls belong to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from control.api_auth import actor_of
from control.models import ApiToken
from runs.models import TERMINAL_PHASES, McpSession, Run
from runs.services import run_start


@dataclass(frozen=True)
class Caller:
    """One MCP request's caller: its token, its session's key (McpSession.key), its
    client's name, and the origin the links it is given point at."""

    token: ApiToken
    session_key: str
    client_name: str
    base_url: str

    @property
    def actor(self) -> str:
        return actor_of(self.token)


@transaction.atomic
def session_open(caller: Caller) -> McpSession:
    """The caller's session, made when first seen (a handshake names the client once)."""
    return _locked_session(caller)


@transaction.atomic
def session_run(caller: Caller) -> Run:
    """The run of the caller's session: started at its first call, and again once it ended."""
    session = _locked_session(caller)
    if session.run is None or session.run.phase in TERMINAL_PHASES:
        client = session.client_name or caller.client_name or "an unnamed client"
        session.run = run_start(
            tenant=caller.token.tenant, goal=f"MCP session of {client}", created_by=caller.actor
        )
        session.save(update_fields=["run", "last_seen_at"])
    return session.run


@transaction.atomic
def session_start_run(
    caller: Caller, *, goal: str, budget: int | None, deadline: datetime | None
) -> Run:
    """A new run for the caller's session (countersign_start_run); the one before keeps
    its intents and receipts, and a call the new run sees again is a new intent of it."""
    session = _locked_session(caller)
    session.run = run_start(
        tenant=caller.token.tenant,
        goal=goal,
        created_by=caller.actor,
        budget_limit=budget,
        deadline=deadline,
    )
    session.save(update_fields=["run", "last_seen_at"])
    return session.run


def _locked_session(caller: Caller) -> McpSession:
    session, _ = (
        McpSession.objects.select_for_update(of=("self",))
        .select_related("run")
        .get_or_create(
            token=caller.token,
            key=caller.session_key,
            defaults={"tenant_id": caller.token.tenant_id, "client_name": caller.client_name},
        )
    )
    return session
