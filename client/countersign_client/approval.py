"""`requires_approval`: turn a function that describes a write into one that performs it safely.

The decorated function returns an `Intent` (what to do and the observation that justifies
it). The decorator records the observation, proposes the frozen intent, waits for the
operator's decision and the worker's outcome, and returns the receipt, or raises Rejected,
Expired, Uncertain (with the reconciliation case's link), ActionFailed or Cancelled.

Calling it again after the agent restarted is safe: the same `action_id` with the same
arguments is the same intent, so it resumes waiting instead of proposing twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from countersign_client import errors
from countersign_client.client import Countersign, content_hash
from countersign_client.types import Action, Receipt

P = ParamSpec("P")
DEFAULT_TIMEOUT_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class Observation:
    """What the agent saw: give `content` (hashed here) or its `content_hash`."""

    source: str
    ref: str
    summary: str
    content: bytes | str | None = None
    content_hash: str | None = None

    def hash(self) -> str:
        if self.content_hash is not None:
            return self.content_hash
        if self.content is None:
            raise ValueError("an Observation needs its content or its content_hash")
        return content_hash(self.content)


@dataclass(frozen=True)
class Intent:
    """One write: a stable logical `action_id`, its target and arguments."""

    action_id: str
    target: str
    args: dict[str, Any] = field(default_factory=dict)
    observation: Observation | None = None
    # Overrides the decorator's run_id, for functions that serve several runs.
    run_id: str | None = None


def requires_approval(
    client: Countersign,
    *,
    tool: str,
    run_id: str | None = None,
    contract_version: str = "v1",
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Callable[[Callable[P, Intent]], Callable[P, Receipt]]:
    """Decorates a function returning an Intent for `tool`; the call returns its receipt."""

    def decorate(describe: Callable[P, Intent]) -> Callable[P, Receipt]:
        @functools.wraps(describe)
        def perform(*args: P.args, **kwargs: P.kwargs) -> Receipt:
            intent = describe(*args, **kwargs)
            run = intent.run_id or run_id
            if run is None:
                raise ValueError("give requires_approval a run_id, or set Intent.run_id")
            action = propose_intent(client, run, tool, contract_version, intent)
            return client.await_receipt(action["id"], timeout=timeout)

        return perform

    return decorate


def propose_intent(
    client: Countersign, run_id: str, tool: str, version: str, intent: Intent
) -> Action:
    """Records the intent's observation, if any, and proposes the frozen intent."""

    def propose(observation_id: str | None):
        return client.propose_action(
            run_id,
            action_id=intent.action_id,
            tool=tool,
            target=intent.target,
            args=intent.args,
            contract_version=version,
            observation_id=observation_id,
        )

    if intent.observation is None or client.find_action(run_id, intent.action_id) is not None:
        # Frozen already (a resumed or restarted agent): the same arguments answer the same
        # intent, other ones IntentConflict, and no second observation is recorded.
        return propose(None)
    seen = intent.observation
    try:
        observation = client.record_observation(
            run_id, source=seen.source, ref=seen.ref, summary=seen.summary, content_hash=seen.hash()
        )
    except errors.Conflict as refused:
        # The run no longer takes observations: after a restart it may be waiting on this
        # very intent. Proposing it again finds it when the arguments are the same.
        try:
            return propose(None)
        except errors.IntentConflict:
            raise
        except (errors.Unprocessable, errors.Conflict):
            raise refused from None
    return propose(observation["id"])
