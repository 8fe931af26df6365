"""`Countersign`: one method per endpoint of the agent API, safe to retry.

Every logical POST gets a fresh `Idempotency-Key`; the client's own retries (connection
errors, timeouts, 502/503/504, and 409 while the same key is still in flight) resend the same
bytes under the same key, so the server runs it at most once and replays its first answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import requests

from countersign_client import errors
from countersign_client.types import (
    Action,
    CancelReport,
    ObservationRecord,
    Plan,
    Receipt,
    Run,
    RunPage,
    Tool,
)

API_PREFIX = "/api/v1"
MAX_LONG_POLL_SECONDS = 30.0
# Still heading for a decision or an outcome: wait_for keeps polling these.
PENDING_STATUSES = frozenset(
    {"waiting_approval", "approved", "in_flight", "retry_wait", "needs_attention"}
)
_RETRIED_STATUSES = frozenset({502, 503, 504})
_CASE_APPEARS_WITHIN_SECONDS = 10.0


def content_hash(content: bytes | str) -> str:
    """The `sha256:<hex>` hash an observation records of what the agent saw."""
    data = content.encode() if isinstance(content, str) else content
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Countersign:
    """A client for one tenant's token.

    `base_url` is the server (`http://host:8000`) or its API root (`.../api/v1`). `retries`
    is how often a request is resent after a network failure or a transient answer.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        self.api_url = root if root.endswith(API_PREFIX) else root + API_PREFIX
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()

    # Runs.

    def create_run(
        self,
        goal: str,
        *,
        plan: dict[str, Any] | None = None,
        budget: int | None = None,
        deadline: str | None = None,
        versions: dict[str, Any] | None = None,
    ) -> Run:
        """Starts a run. `budget` limits its tool calls; `deadline` is an RFC 3339 string."""
        body: dict[str, Any] = {"goal": goal}
        optional = {"plan": plan, "budget": budget, "deadline": deadline, "versions": versions}
        body.update({name: value for name, value in optional.items() if value is not None})
        return cast(Run, self._post("/runs", body))

    def list_runs(self, *, limit: int = 20, offset: int = 0, phase: str | None = None) -> RunPage:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if phase is not None:
            params["phase"] = phase
        return cast(RunPage, self._get("/runs", params=params))

    def iter_runs(self, *, phase: str | None = None, page_size: int = 100) -> Iterator[Run]:
        """Every run of the tenant, newest first, page by page."""
        offset = 0
        while True:
            page = self.list_runs(limit=page_size, offset=offset, phase=phase)
            yield from page["items"]
            if page["next"] is None:
                return
            offset += page_size

    def get_run(self, run_id: str) -> Run:
        return cast(Run, self._get(f"/runs/{run_id}"))

    def complete_run(self, run_id: str, *, action_ids: list[str]) -> Run:
        """Completes the run with evidence: the actions whose receipts met the goal."""
        body = {"evidence": {"action_ids": list(action_ids)}}
        return cast(Run, self._post(f"/runs/{run_id}/complete", body))

    def cancel_run(self, run_id: str, *, reason: str = "") -> CancelReport:
        """Cancels the run; answers the effects done, in doubt and not started."""
        return cast(CancelReport, self._post(f"/runs/{run_id}/cancel", {"reason": reason}))

    def get_checkpoint(self, run_id: str) -> dict[str, Any]:
        """The run's latest checkpoint, verified by the server, approvers as opaque ids (so its
        `mac` is the server's, over the stored form: `mac_scope` is `server_only`)."""
        return cast(dict, self._get(f"/runs/{run_id}/checkpoint"))

    # Tools, observations, actions.

    def list_tools(self) -> list[Tool]:
        return cast(list, self._get("/tools"))

    def record_observation(
        self,
        run_id: str,
        *,
        source: str,
        ref: str,
        summary: str,
        content_hash: str,
    ) -> ObservationRecord:
        body = {"source": source, "ref": ref, "content_hash": content_hash, "summary": summary}
        return cast(ObservationRecord, self._post(f"/runs/{run_id}/observations", body))

    def propose_action(
        self,
        run_id: str,
        *,
        action_id: str,
        tool: str,
        target: str,
        args: dict[str, Any],
        contract_version: str = "v1",
        observation_id: str | None = None,
    ) -> Action:
        """Freezes an intent. The same action_id with the same arguments answers the same
        intent; with other arguments it raises IntentConflict (use a new action_id)."""
        body = {
            "action_id": action_id,
            "tool": tool,
            "target": target,
            "args": args,
            "contract_version": contract_version,
            "observation_id": observation_id,
        }
        return cast(Action, self._post(f"/runs/{run_id}/actions", body))

    def propose_plan(
        self, run_id: str, *, intents: list[dict[str, Any]], observation_id: str | None
    ) -> Plan:
        """Freezes several intents as one plan ({action_id, tool, target, args,
        contract_version?} each), approved or rejected as one and then executed one at a
        time in this order. The same intents again answer the same plan (then without an
        observation_id); a new plan must rest on an observation."""
        body = {"intents": intents, "observation_id": observation_id}
        return cast(Plan, self._post(f"/runs/{run_id}/plans", body))

    def find_action(self, run_id: str, action_id: str) -> Action | None:
        """The intent the run froze under the logical `action_id`, or None."""
        found = self._get(f"/runs/{run_id}/actions", params={"action_id": action_id})
        return cast(Action, found["items"][0]) if found["items"] else None

    def get_action(self, action_id: str, *, wait: float = 0) -> Action:
        """The action; with `wait`, long-polls up to that many seconds (at most 30) while it
        waits for approval or executes."""
        wait = max(0.0, min(float(wait), MAX_LONG_POLL_SECONDS))
        params = {"wait": f"{wait:g}"} if wait else None
        return cast(
            Action,
            self._get(f"/actions/{action_id}", params=params, read_timeout=wait + self.timeout),
        )

    def wait_for(self, action_id: str, timeout: float) -> Action:
        """Long-polls until the action has a decision or an outcome, or raises WaitTimeout.

        Follows an operator's edit (`superseded_by`) to the intent that replaced it. For an
        uncertain action it waits briefly for its reconciliation case to open.
        """
        deadline = time.monotonic() + timeout
        action = self.get_action(action_id)
        while True:
            if action["status"] == "superseded" and action["superseded_by"]:
                action = self.get_action(action["superseded_by"]["id"])
                continue
            remaining = deadline - time.monotonic()
            if action["status"] not in PENDING_STATUSES:
                if action["status"] == "uncertain" and action["reconciliation_case"] is None:
                    return self._wait_for_case(action, min(remaining, _CASE_APPEARS_WITHIN_SECONDS))
                return action
            if remaining <= 0:
                raise errors.WaitTimeout(action, timeout)
            action = self.get_action(action["id"], wait=min(remaining, MAX_LONG_POLL_SECONDS))

    def _wait_for_case(self, action: Action, seconds: float) -> Action:
        deadline = time.monotonic() + seconds
        while action["reconciliation_case"] is None and time.monotonic() < deadline:
            time.sleep(0.25)
            action = self.get_action(action["id"])
        return action

    def await_receipt(self, action_id: str, *, timeout: float) -> Receipt:
        """Waits for the outcome: the receipt, or Rejected, Expired, Uncertain,
        ActionFailed, Cancelled (or WaitTimeout)."""
        return receipt_of(self.wait_for(action_id, timeout))

    # HTTP.

    def _get(
        self, path: str, *, params: dict[str, Any] | None = None, read_timeout: float | None = None
    ) -> Any:
        return self._send("GET", path, params=params, read_timeout=read_timeout)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        data = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        # One key per logical request, reused by every retry of it below.
        key = uuid.uuid4().hex
        return self._send("POST", path, data=data.encode(), idempotency_key=key)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        data: bytes | None = None,
        idempotency_key: str | None = None,
        read_timeout: float | None = None,
    ) -> Any:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json, application/problem+json",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = f'"{idempotency_key}"'
        timeout = (self.timeout, read_timeout or self.timeout)
        for attempt in range(self.retries + 1):
            last_try = attempt == self.retries
            try:
                response = self.session.request(
                    method,
                    self.api_url + path,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=timeout,
                )
            except (requests.ConnectionError, requests.Timeout) as error:
                if last_try:
                    raise errors.ConnectionFailed(f"{method} {path}: {error}") from error
                self._pause(attempt, None)
                continue
            if not last_try and self._transient(response):
                self._pause(attempt, response.headers.get("Retry-After"))
                continue
            return self._decode(response)
        raise AssertionError("unreachable")

    @staticmethod
    def _transient(response: requests.Response) -> bool:
        if response.status_code in _RETRIED_STATUSES:
            return True
        if response.status_code == 409:
            return _problem(response).get("code") == "idempotency_key_in_flight"
        return False

    def _pause(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff * 2**attempt
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                delay = max(delay, min(float(retry_after), 30.0))
        time.sleep(delay)

    @staticmethod
    def _decode(response: requests.Response) -> Any:
        if response.status_code >= 400:
            raise errors.error_for(response.status_code, _problem(response))
        return response.json()


def _problem(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"title": response.reason or "", "detail": response.text[:500]}


def receipt_of(action: Action) -> Receipt:
    """The receipt of a finished action, or the exception that says why there is none."""
    status = action["status"]
    if status in ("succeeded", "satisfied") and action["receipt"] is not None:
        return action["receipt"]
    if status == "rejected":
        raise errors.Rejected(dict(action))
    if status == "expired":
        raise errors.Expired(dict(action))
    if status == "uncertain":
        raise errors.Uncertain(dict(action))
    if status == "cancelled":
        raise errors.Cancelled(dict(action))
    raise errors.ActionFailed(dict(action))
