"""Who calls through the MCP gateway: the run each MCP session's calls belong to, and the
agent (token plus client name) a session is, the same across sessions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from control.api_kit.tokens import actor_of
from control.models import ApiToken
from runs.models import TERMINAL_PHASES, McpAgent, McpAgentRun, McpSession, Run
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
    agent = agent_locked(caller)
    session = _locked_session(caller)
    run = session.run
    if run is None or run.phase in TERMINAL_PHASES:
        client = session.client_name or caller.client_name or "an unnamed client"
        run = run_start(
            tenant=caller.token.tenant, goal=f"MCP session of {client}", created_by=caller.actor
        )
        _session_moves_to(session, run, agent=agent)
    return run


@transaction.atomic
def session_start_run(
    caller: Caller, *, goal: str, budget: int | None, deadline: datetime | None
) -> Run:
    """A new run for the caller's session (countersign_start_run); the one before keeps
    its intents and receipts, and a call the new run sees again is a new intent of it."""
    agent = agent_locked(caller)
    session = _locked_session(caller)
    run = run_start(
        tenant=caller.token.tenant,
        goal=goal,
        created_by=caller.actor,
        budget_limit=budget,
        deadline=deadline,
    )
    _session_moves_to(session, run, agent=agent)
    return run


def session_seen(caller: Caller) -> None:
    """Marks the caller's session active now (the idle sweep ends a run nobody calls). The
    application's clock, as the run's own event times: idleness is an hour, not a lease."""
    McpSession.objects.filter(token=caller.token, key=caller.session_key).update(
        last_seen_at=timezone.now()
    )


def agent_locked(caller: Caller) -> McpAgent:
    """The caller's agent, locked until the transaction ends: its writes are proposed one
    at a time, whichever session they come from. Call inside transaction.atomic. Whoever
    locks both takes the agent first, then the session: never the other way round."""
    agent, _ = McpAgent.objects.select_for_update().get_or_create(
        token=caller.token,
        client_name=_client_name(caller),
        defaults={"tenant_id": caller.token.tenant_id},
    )
    return agent


def _client_name(caller: Caller) -> str:
    """The client's name as its session recorded it (a handshake-era client names itself
    once, at `initialize`), else as this request gives it (a sessionless client names itself
    in each request)."""
    session = McpSession.objects.filter(token=caller.token, key=caller.session_key).first()
    return (session.client_name if session else "") or caller.client_name


def _session_moves_to(session: McpSession, run: Run, *, agent: McpAgent) -> None:
    session.run = run
    session.save(update_fields=["run", "last_seen_at"])
    McpAgentRun.objects.create(run=run, agent=agent)


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
