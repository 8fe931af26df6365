"""Fault injection (tests and demos only, when settings.SANDBOX_FAULTS is on).

A plan names a tool, a fault and a count; each call of that tool consumes one, oldest plan
first. "Before commit" faults answer without running the call; "commit then" faults run it
(whatever its outcome) and then spoil the answer.
"""

from __future__ import annotations

import inspect
import re
import socket
import socketserver
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from sandbox.exceptions import BadRequest, SandboxError
from sandbox.models import FaultKind, FaultPlan

SANDBOX_DATABASE = "sandbox"
TOOLS = ("ticket.lookup", "ticket.close", "notify.send", "payment.charge", "payment.refund")
MAX_COUNT = 1000
MAX_SECONDS = 600
MAX_RETRY_AFTER = 86_400

_SECONDS = re.compile(r"\d{1,6}(\.\d{1,6})?")
_INTEGER = re.compile(r"\d{1,9}")
# kind -> (what its parameter means, its syntax, its largest value); None: takes none.
_PARAMETERS: dict[str, tuple[str, re.Pattern[str], float] | None] = {
    FaultKind.FAIL_BEFORE_COMMIT: None,
    FaultKind.COMMIT_THEN_DROP: None,
    FaultKind.COMMIT_THEN_MALFORMED: None,
    FaultKind.COMMIT_THEN_FAIL: None,
    FaultKind.COMMIT_THEN_HANG: ("SECONDS", _SECONDS, MAX_SECONDS),
    FaultKind.HANG_BEFORE_COMMIT: ("SECONDS", _SECONDS, MAX_SECONDS),
    FaultKind.RATE_LIMIT: ("RETRY_AFTER (whole seconds)", _INTEGER, MAX_RETRY_AFTER),
    FaultKind.SLOW: ("MS (whole milliseconds)", _INTEGER, MAX_SECONDS * 1000),
}
MALFORMED_BODY = b"<html><body><h1>200 OK</h1><p>Your request was processed.</p></body></html>"


@dataclass(frozen=True)
class Fault:
    kind: str
    parameter: float | None = None


def fault_parse(text: object) -> Fault:
    """`kind` or `kind:NUMBER`, e.g. "commit_then_hang:5"; BadRequest for anything else."""
    if not isinstance(text, str):
        raise BadRequest("fault must be a string such as 'commit_then_hang:5'")
    kind, separator, number = text.partition(":")
    if kind not in _PARAMETERS:
        raise BadRequest(f"unknown fault {kind!r}; known: {', '.join(_PARAMETERS)}")
    rule = _PARAMETERS[kind]
    if rule is None:
        if separator:
            raise BadRequest(f"fault {kind} takes no parameter")
        return Fault(kind)
    meaning, syntax, largest = rule
    if not syntax.fullmatch(number):
        raise BadRequest(f"fault {kind} needs {kind}:{meaning}, got {text!r}")
    value = float(number)
    if value > largest:
        raise BadRequest(f"fault {kind} parameter must be at most {largest:g}")
    return Fault(kind, value)


def fault_plan_add(*, tool: object, fault: object, count: object) -> FaultPlan:
    if tool not in TOOLS:
        raise BadRequest(f"unknown tool {tool!r}; known: {', '.join(TOOLS)}")
    parsed = fault_parse(fault)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise BadRequest(f"count must be an integer from 1 to {MAX_COUNT}")
    return FaultPlan.objects.create(
        tool=tool, kind=parsed.kind, parameter=parsed.parameter, remaining=count
    )


def fault_plans_clear() -> int:
    return FaultPlan.objects.all().delete()[0]


def fault_take(*, tool: str) -> Fault | None:
    """Consumes one call of the oldest pending plan for tool; None when there is none."""
    if not settings.SANDBOX_FAULTS:
        return None
    with transaction.atomic(using=SANDBOX_DATABASE):
        plan = (
            FaultPlan.objects.select_for_update()
            .filter(tool=tool, remaining__gt=0)
            .order_by("id")
            .first()
        )
        if plan is None:
            return None
        FaultPlan.objects.filter(pk=plan.pk).update(remaining=F("remaining") - 1)
    return Fault(plan.kind, plan.parameter)


def error_response(error: SandboxError) -> JsonResponse:
    return JsonResponse(error.as_json(), status=error.status)


def with_faults(
    tool: str, environ: dict[str, Any], call: Callable[[], HttpResponse]
) -> HttpResponse:
    """Runs call (the tool's business step and its answer) under the tool's next fault.

    A refusal the call raises is answered too, so "commit then" faults spoil refusals alike.
    """

    def answer() -> HttpResponse:
        try:
            return call()
        except SandboxError as error:
            return error_response(error)

    fault = fault_take(tool=tool)
    if fault is None:
        return answer()
    if fault.kind == FaultKind.FAIL_BEFORE_COMMIT:
        return JsonResponse(
            {"type": "injected_failure", "detail": "failed before commit (injected)"}, status=500
        )
    if fault.kind == FaultKind.RATE_LIMIT:
        response = JsonResponse(
            {"type": "rate_limited", "detail": "too many requests (injected)"}, status=429
        )
        response["Retry-After"] = str(int(fault.parameter or 0))
        return response
    if fault.kind == FaultKind.HANG_BEFORE_COMMIT:
        time.sleep(fault.parameter or 0)
    if fault.kind == FaultKind.SLOW:
        time.sleep((fault.parameter or 0) / 1000)
    response = answer()
    if fault.kind == FaultKind.COMMIT_THEN_HANG:
        time.sleep(fault.parameter or 0)
    if fault.kind == FaultKind.COMMIT_THEN_FAIL:
        # A server that commits, then fails on the way out (a crash in a post-commit hook).
        return JsonResponse(
            {"type": "injected_failure", "detail": "failed after commit (injected)"}, status=503
        )
    if fault.kind == FaultKind.COMMIT_THEN_MALFORMED:
        return HttpResponse(MALFORMED_BODY, status=200, content_type="text/html; charset=utf-8")
    if fault.kind == FaultKind.COMMIT_THEN_DROP:
        return _dropped(response, environ)
    return response


def _dropped(response: HttpResponse, environ: dict[str, Any]) -> StreamingHttpResponse:
    """The status line, the headers and half the body, then the connection ends.

    Content-Length announces the whole body, so the client knows the answer is cut short
    (requests raises ChunkedEncodingError, "Connection broken: IncompleteRead").
    """
    body = response.content

    def stream() -> Iterator[bytes]:
        yield body[: len(body) // 2]
        _drop_connection(environ)

    dropped = StreamingHttpResponse(
        stream(), status=response.status_code, content_type=response["Content-Type"]
    )
    dropped["Content-Length"] = str(len(body))
    return dropped


def _drop_connection(environ: dict[str, Any]) -> None:
    client = _client_socket(environ)
    if client is None:
        # Servers we cannot reach into (not gunicorn, not socketserver-based) close the
        # connection when the response iterator fails mid-body.
        raise RuntimeError("sandbox: dropping the connection (commit_then_drop)")
    client.shutdown(socket.SHUT_RDWR)


def _client_socket(environ: dict[str, Any]) -> socket.socket | None:
    """The client's socket: gunicorn lends it in environ; runserver and live_server do not.

    Django's development server (and pytest-django's live_server) is socketserver-based, and
    the response body is iterated inside its request handler, whose `request` attribute is
    the client's socket: find that handler up the stack.
    """
    lent = environ.get("gunicorn.socket")
    if isinstance(lent, socket.socket):
        return lent
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, socketserver.BaseRequestHandler) and isinstance(
                owner.request, socket.socket
            ):
                return owner.request
            frame = frame.f_back
        return None
    finally:
        del frame  # frames referencing themselves would keep the whole stack alive
