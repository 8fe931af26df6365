"""A scripted agent that plays the seed texts' scenarios against a running Countersign.

It talks to Countersign only through the Python client over HTTP, as a real agent would;
the command only creates its API token (`--token` to bring your own).

  ticket         look up ticket-7, propose closing it, wait for an operator, complete the run
                 with the receipt as evidence
  notifications  propose 100 notifications as one plan (one approval), one logical action
                 per recipient, sent in order; an uncertain one holds back the rest until a
                 reconciler resolves it; --cancel-after N cancels and prints what was sent
  saga           charge -> ship; with --ship-fails the shipping step fails for good and
                 Countersign refunds the charge (an intent of its own, approved like any other)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests
from countersign_client import (
    Countersign,
    Intent,
    Observation,
    content_hash,
    receipt_of,
    requires_approval,
)
from countersign_client import errors as client_errors
from django.core.management.base import BaseCommand, CommandError

from control.exceptions import ControlError
from control.services import api_token_create, tenant_get

SCENARIOS = ("ticket", "notifications", "saga")
TERMINAL = {"completed", "failed", "cancelled", "budget_exhausted", "deadline_exceeded"}


@dataclass
class Agent:
    client: Countersign
    base_url: str
    say: callable
    timeout: float

    def read(self, path: str) -> tuple[dict, str]:
        """The agent's own read of the outside world; the text is what it observed."""
        answer = requests.get(f"{self.base_url}/sandbox/{path}", timeout=10)
        answer.raise_for_status()
        return answer.json(), answer.text

    def wait_until_settled(self, action_id: str) -> dict:
        """After Uncertain: a reconciler decides; wait until the action leaves that state."""
        while True:
            action = self.client.get_action(action_id, wait=30)
            if action["status"] not in ("uncertain", "approved", "retry_wait", "in_flight"):
                return action
            time.sleep(1)

    def wait_for_run_end(self, run_id: str) -> dict:
        while (run := self.client.get_run(run_id))["phase"] not in TERMINAL:
            time.sleep(1)
        return run


def play_ticket(agent: Agent, ticket: str = "ticket-7") -> dict:
    run = agent.client.create_run(
        f"Close {ticket} once the customer confirmed the fix",
        plan={"summary": f"look up {ticket}; close it"},
        budget=5,
    )
    agent.say(f"run {run['id']}: looking up {ticket}")
    state, seen = agent.read(f"tickets/{ticket}")

    @requires_approval(agent.client, run_id=run["id"], tool="ticket.close", timeout=agent.timeout)
    def close(ticket_id: str) -> Intent:
        return Intent(
            action_id=f"close-{ticket_id}",
            target=ticket_id,
            args={"resolution": "fixed"},
            observation=Observation(
                source="ticket.lookup",
                ref=ticket_id,
                content=seen,
                summary=f"{ticket_id} is {state['status']}; the customer confirmed the fix",
            ),
        )

    agent.say(f"proposed closing {ticket}; waiting for an operator in the inbox")
    receipt = close(ticket)
    agent.say(f"closed: receipt {receipt['receipt_id']}")
    return agent.client.complete_run(run["id"], action_ids=[f"close-{ticket}"])


def play_notifications(agent: Agent, *, count: int = 100, cancel_after: int | None = None):
    """One plan of `count` notifications: one approval in the inbox, then each is sent by a
    worker in order under its own key; an uncertain one holds back the rest until a
    reconciler settles it."""
    run = agent.client.create_run(
        f"Tell {count} customers their order shipped",
        plan={"summary": f"{count} notifications, in order, one per customer"},
    )
    shipped = "\n".join(f"order {1000 + n} shipped" for n in range(1, count + 1))
    seen = agent.client.record_observation(
        run["id"],
        source="orders",
        ref="shipped-today",
        summary=f"{count} orders left the warehouse today",
        content_hash=content_hash(shipped),
    )
    plan = agent.client.propose_plan(
        run["id"],
        intents=[
            {
                "action_id": f"notify-{number:03d}",
                "tool": "notify.send",
                "target": f"customer-{number:03d}@example.com",
                "args": {"body": f"Your order {1000 + number} has shipped."},
            }
            for number in range(1, count + 1)
        ],
        observation_id=seen["id"],
    )
    agent.say(
        f"run {run['id']}: a plan of {count} notifications ({plan['digest'][:19]}…); "
        "waiting for one approval in the inbox"
    )
    sent = []
    for number, intent in enumerate(plan["intents"], start=1):
        if cancel_after is not None and number > cancel_after:
            cancelled = agent.client.cancel_run(run["id"], reason=f"stopped after {cancel_after}")
            report = cancelled["report"]
            agent.say(
                f"cancelled: {len(report['done'])} sent, {len(report['in_doubt'])} in "
                f"doubt, {len(report['not_started'])} not started"
            )
            return cancelled["run"]
        try:
            receipt_of(agent.client.wait_for(intent["id"], timeout=agent.timeout))
        except client_errors.Uncertain as uncertain:
            agent.say(
                f"#{number} is uncertain: the plan waits for a reconciler at {uncertain.case_url}"
            )
            settled = agent.wait_until_settled(intent["id"])
            if settled["status"] != "succeeded":
                raise CommandError(f"#{number} ended {settled['status']}; the plan stops") from None
        sent.append(intent["action_id"])
        agent.say(f"#{number} sent")
    return agent.client.complete_run(run["id"], action_ids=sent)


def play_saga(agent: Agent, *, ship_fails: bool = False) -> dict:
    run = agent.client.create_run(
        "Charge order 1001, then ship it",
        plan={
            "summary": "charge -> ship; refund the charge if shipping fails",
            "compensate_on_failure": True,
        },
    )
    agent.say(f"run {run['id']}: charge, then ship")

    def step(tool: str, action_id: str, target: str, args: dict, summary: str):
        @requires_approval(agent.client, run_id=run["id"], tool=tool, timeout=agent.timeout)
        def perform() -> Intent:
            return Intent(
                action_id=action_id,
                target=target,
                args=args,
                observation=Observation(
                    source="orders", ref="order-1001", content=summary, summary=summary
                ),
            )

        return perform()

    step(
        "payment.charge",
        "charge",
        "cus_1001",
        {"amount_cents": 4200, "currency": "EUR"},
        "order 1001: 42.00 EUR to charge",
    )
    agent.say("charged")
    shipping_ticket = "ticket-9999" if ship_fails else "ticket-42"
    try:
        step(
            "ticket.close",
            "ship",
            shipping_ticket,
            {"resolution": "shipped"},
            f"order 1001 ships under {shipping_ticket}",
        )
    except client_errors.ActionFailed as failed:
        agent.say(
            f"shipping failed for good ({failed.error_class}); Countersign compensates "
            "the charge: approve the refund in the inbox"
        )
        ended = agent.wait_for_run_end(run["id"])
        agent.say(f"run {ended['phase']}: {ended['stop_reason']}")
        return ended
    agent.say("shipped")
    return agent.client.complete_run(run["id"], action_ids=["charge", "ship"])


class Command(BaseCommand):
    help = "Play a scripted agent scenario (ticket, notifications, saga) through the API."

    def add_arguments(self, parser):
        parser.add_argument("--scenario", required=True, choices=SCENARIOS)
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Countersign's base URL")
        parser.add_argument("--tenant", default="demo")
        parser.add_argument("--token", help="an API token; one is created when omitted")
        parser.add_argument("--count", type=int, default=100, help="notifications to send")
        parser.add_argument("--cancel-after", type=int, help="cancel the batch after N")
        parser.add_argument("--ship-fails", action="store_true", help="make shipping fail")
        parser.add_argument(
            "--timeout", type=float, default=24 * 3600.0, help="seconds to wait for each decision"
        )

    def handle(
        self,
        *args,
        scenario,
        url,
        tenant,
        token,
        count,
        cancel_after,
        ship_fails,
        timeout,
        **options,
    ):
        url = url.rstrip("/")
        token = token or self._token(tenant)
        agent = Agent(
            client=Countersign(url, token=token),
            base_url=url,
            timeout=timeout,
            say=lambda line: self.stdout.write(f"[{scenario}] {line}"),
        )
        try:
            if scenario == "ticket":
                run = play_ticket(agent)
            elif scenario == "notifications":
                run = play_notifications(agent, count=count, cancel_after=cancel_after)
            else:
                run = play_saga(agent, ship_fails=ship_fails)
        except client_errors.ActionNotDone as stopped:
            raise CommandError(f"{type(stopped).__name__}: {stopped}") from None
        except client_errors.ConnectionFailed:
            raise CommandError(
                f"nothing is listening at {url}: start Countersign (make demo), or give its "
                "address with --url"
            ) from None
        except client_errors.CountersignError as error:
            raise CommandError(f"the API refused: {error}") from None
        self.stdout.write(self.style.SUCCESS(f"[{scenario}] done: run {run['phase']}"))

    def _token(self, tenant: str) -> str:
        try:
            _, token = api_token_create(
                tenant=tenant_get(tenant),
                name=f"demo-agent-{time.time_ns()}",
                actor="manage.py demo_agent",
            )
        except ControlError as error:
            raise CommandError(str(error)) from None
        return token
