"""`Idempotency-Key` on the agent API's POSTs, with the IETF httpapi draft's semantics.

- The key is scoped to the tenant. It binds to a fingerprint of the first request: method,
  path and the SHA-256 of the raw body bytes.
- The first request's response is stored with the effect it describes, in one transaction,
  and replayed (with `Idempotent-Replayed: true`) for the same key and body.
- The same key with another body (or another endpoint) is 422 `idempotency_key_reused`.
- The same key while the first request is still running is 409 `idempotency_key_in_flight`
  (with Retry-After): its transaction holds a row lock on the key, tested with NOWAIT.
- Every answer of a request that ran is stored, 2xx and 4xx alike. Not stored, so the key is
  freed and a retry runs afresh: a 5xx (its effects were rolled back), and a body refused
  before anything ran (400 invalid_json, 422 validation_error, 429 too_many_waiting): those
  write nothing at all.
- A request over the token's rate is refused (429) before it claims the key, so a retry
  after the Retry-After runs afresh.
- Keys are kept KEY_TTL (24 hours) from first use; `purge_expired()` (called by the sweep)
  deletes older ones, and a key past its TTL that is not swept yet counts as unused.

Accepted key syntax: 1 to 255 visible ASCII characters, bare or as the draft's quoted
structured-field string (`Idempotency-Key: "8e03978e-..."`).

Every POST, with or without a key, runs in one transaction that is rolled back when the
answer is a 5xx, so an unexpected error never leaves half a request behind.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from datetime import timedelta

from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse

from control.api_kit.limits import ApiLimited, limit_problem
from control.api_kit.parsing import parse_request_body
from control.api_kit.problems import BodyNotAcceptable, body_problem, problem_response
from control.api_kit.tokens import rate_checked_token
from control.foundation.canonical import content_hash
from control.foundation.strictjson import StrictJSONError
from control.models import ApiIdempotencyKey, Tenant

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_TTL = timedelta(hours=24)
IN_FLIGHT_RETRY_AFTER_SECONDS = 1
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_CLAIM_ATTEMPTS = 3

Handler = Callable[[], HttpResponse]


def parse_key(header: str) -> str | None:
    """The key of an Idempotency-Key header value, or None when it is malformed."""
    value = header.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if '"' in value or "\\" in value or not _KEY.fullmatch(value):
        return None
    return value


def request_fingerprint(request: HttpRequest) -> str:
    body_hash = hashlib.sha256(request.body).hexdigest()
    return content_hash(f"{request.method} {request.get_full_path()}\n{body_hash}".encode())


def idempotent_post(run: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wraps a ninja operation's `run` (apply with `ninja.decorators.decorate_view`)."""

    @functools.wraps(run)
    def wrapper(request: HttpRequest, **path_params) -> HttpResponse:
        def handler() -> HttpResponse:
            return run(request, **path_params)

        header = request.headers.get(HEADER)
        try:
            token = rate_checked_token(request)
        except ApiLimited as limited:
            return limit_problem(request, limited)
        if header is None or token is None:
            # Without a token ninja answers 401 and nothing is stored.
            return _atomic(handler)
        key = parse_key(header)
        if key is None:
            return problem_response(
                "idempotency_key_invalid",
                "Idempotency-Key must be 1 to 255 visible ASCII characters, bare or quoted",
            )
        # A body the strict parser refuses never claims the key: it writes nothing at all.
        try:
            fingerprint = request_fingerprint(request)
            if request.body:
                parse_request_body(request)
        except (RequestDataTooBig, StrictJSONError, BodyNotAcceptable) as error:
            return body_problem(error)
        return execute_once(tenant=token.tenant, key=key, fingerprint=fingerprint, handler=handler)

    return wrapper


def _atomic(handler: Handler) -> HttpResponse:
    with transaction.atomic():
        response = handler()
        if response.status_code >= 500:
            transaction.set_rollback(True)
    return response


_BUSY = object()


def execute_once(*, tenant: Tenant, key: str, fingerprint: str, handler: Handler) -> HttpResponse:
    """Runs handler at most once per (tenant, key) and fingerprint; see the module docstring."""
    for _ in range(_CLAIM_ATTEMPTS):
        record, _created = ApiIdempotencyKey.objects.get_or_create(
            tenant=tenant, key=key, defaults={"fingerprint": fingerprint}
        )
        with transaction.atomic():
            locked = _lock(record.pk)
            if locked is _BUSY:
                return _in_flight(key)
            if locked is None:
                continue  # purged, or freed by a failed first request: claim it again
            return _answer(locked, fingerprint, handler)
    return _in_flight(key)


def _lock(pk: int):
    """The key's row locked for this transaction; _BUSY while another request holds it."""
    try:
        with transaction.atomic():
            return (
                ApiIdempotencyKey.objects.select_for_update(nowait=True)
                .annotate(
                    expired=ExpressionWrapper(
                        Q(created_at__lte=Now() - KEY_TTL), output_field=BooleanField()
                    )
                )
                .filter(pk=pk)
                .first()
            )
    except OperationalError:
        return _BUSY


def _answer(record: ApiIdempotencyKey, fingerprint: str, handler: Handler) -> HttpResponse:
    if record.expired:
        _restart(record, fingerprint)
    elif record.fingerprint != fingerprint:
        return problem_response(
            "idempotency_key_reused",
            "this Idempotency-Key was first used with another method, path or body; "
            "use a new key for a new request",
        )
    elif record.state == ApiIdempotencyKey.State.COMPLETED:
        return _replay(record)
    # In flight and ours to run: a first request, or one whose earlier holder crashed.
    with transaction.atomic():
        response = handler()
        if response.status_code >= 500:
            transaction.set_rollback(True)
    if not _stored(response):
        record.delete()
        return response
    ApiIdempotencyKey.objects.filter(pk=record.pk).update(
        state=ApiIdempotencyKey.State.COMPLETED,
        response_status=response.status_code,
        response_content_type=response.get("Content-Type", ""),
        response_body=response.content.decode("utf-8"),
        completed_at=Now(),
    )
    return response


# Refusals of a request that never ran: nothing happened that a retry must not repeat.
# too_many_waiting: the same proposal, retried once people have decided, must then run.
_REFUSED_BEFORE_RUNNING = frozenset({"invalid_json", "validation_error", "too_many_waiting"})


def _stored(response: HttpResponse) -> bool:
    if response.status_code >= 500:
        return False
    return getattr(response, "problem_code", None) not in _REFUSED_BEFORE_RUNNING


def _restart(record: ApiIdempotencyKey, fingerprint: str) -> None:
    ApiIdempotencyKey.objects.filter(pk=record.pk).update(
        fingerprint=fingerprint,
        state=ApiIdempotencyKey.State.IN_FLIGHT,
        response_status=None,
        response_content_type="",
        response_body="",
        created_at=Now(),
        completed_at=None,
    )


def _replay(record: ApiIdempotencyKey) -> HttpResponse:
    response = HttpResponse(
        record.response_body,
        status=record.response_status,
        content_type=record.response_content_type or None,
    )
    response[REPLAYED_HEADER] = "true"
    return response


def _in_flight(key: str) -> HttpResponse:
    response = problem_response(
        "idempotency_key_in_flight",
        f"a request with Idempotency-Key {key!r} is still being processed; retry shortly",
    )
    response["Retry-After"] = str(IN_FLIGHT_RETRY_AFTER_SECONDS)
    return response


def purge_expired() -> int:
    """Deletes keys older than KEY_TTL; returns how many. The sweep calls this."""
    deleted, _ = ApiIdempotencyKey.objects.filter(created_at__lte=Now() - KEY_TTL).delete()
    return deleted
