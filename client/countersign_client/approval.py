"""`requires_approval`: turn a function that describes a write into one that performs it safely.

The decorated function returns an `Intent` (what to do and the observation that justifies
it). The decorator records the observation, proposes the frozen intent, waits for the
operator's decision and the worker's outcome, and returns the receipt, or raises Rejected,
Expired, Uncertain (with the reconciliation case's link), ActionFailed or Cancelled.

Its plan form, `requires_plan_approval`, decorates a function returning a `Plan`: several
intents an operator approves (or rejects) with one decision, which workers then execute one
at a time, in order; the call returns their receipts in that order.

Calling either again after the agent restarted is safe: the same `action_id`s with the same
arguments are the same intents (the same plan), so it resumes waiting instead of proposing
twice.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from countersign_client import errors
from countersign_client.client import Countersign, content_hash
from countersign_client.types import Action, Receipt
from countersign_client.types import Plan as PlanRecord

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


@dataclass(frozen=True)
class Plan:
    """Several writes of one tool, approved as one: every intent is executed under its own
    key, in this order, and an uncertain one holds back the rest until it is reconciled."""

    intents: list[Intent]
    observation: Observation
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
            run = _run_of(intent.run_id or run_id, "Intent")
            action = propose_intent(client, run, tool, contract_version, intent)
            return client.await_receipt(action["id"], timeout=timeout)

        return perform

    return decorate


def requires_plan_approval(
    client: Countersign,
    *,
    tool: str,
    run_id: str | None = None,
    contract_version: str = "v1",
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Callable[[Callable[P, Plan]], Callable[P, list[Receipt]]]:
    """The plan form of `requires_approval`: decorates a function returning a Plan of `tool`
    writes; the call returns their receipts in the plan's order, or raises what the first
    item that did not succeed says (Rejected and Expired concern the whole plan). `timeout`
    is for the whole plan."""

    def decorate(describe: Callable[P, Plan]) -> Callable[P, list[Receipt]]:
        @functools.wraps(describe)
        def perform(*args: P.args, **kwargs: P.kwargs) -> list[Receipt]:
            plan = describe(*args, **kwargs)
            run = _run_of(plan.run_id or run_id, "Plan")
            proposed = propose_plan_of(client, run, tool, contract_version, plan)
            deadline = time.monotonic() + timeout
            return [
                client.await_receipt(item["id"], timeout=max(0.0, deadline - time.monotonic()))
                for item in proposed["intents"]
            ]

        return perform

    return decorate


def _run_of(run_id: str | None, what: str) -> str:
    if run_id is None:
        raise ValueError(f"give the decorator a run_id, or set {what}.run_id")
    return run_id


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


def propose_plan_of(
    client: Countersign, run_id: str, tool: str, version: str, plan: Plan
) -> PlanRecord:
    """Records the plan's observation and proposes it; once frozen (a resumed or restarted
    agent), the same intents answer the same plan and no second observation is recorded."""
    if not plan.intents:
        raise ValueError("a Plan needs at least one Intent")
    intents = [
        {
            "action_id": intent.action_id,
            "tool": tool,
            "target": intent.target,
            "args": intent.args,
            "contract_version": version,
        }
        for intent in plan.intents
    ]
    observation_id = None
    if client.find_action(run_id, plan.intents[0].action_id) is None:
        seen = plan.observation
        observation_id = client.record_observation(
            run_id, source=seen.source, ref=seen.ref, summary=seen.summary, content_hash=seen.hash()
        )["id"]
    return client.propose_plan(run_id, intents=intents, observation_id=observation_id)
