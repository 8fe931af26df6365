"""Calling an external HTTP tool and classifying what came back (or did not).

The one question that matters for a write: could the request have reached the other side?
- Provably not (connection refused, DNS failure, connect timeout): TransientError.
- Possibly (read timeout, connection dropped after sending, a cut-short or malformed body,
  a 2xx without a receipt, an unexpected status): ResultUncertain, never "failed".
- A clear answer: 429, 408 and 5xx transient (the request reached the system, so only a
  tool whose effect class makes a resend safe sends it again: Tool.outcome_unknown_after);
  400/404 invalid arguments; 401/403 permission denied; 409 business rejection; 422
  idempotency conflict (type "idempotency_conflict").
Reads change nothing, so every transport failure of a read is simply transient.

Every call opens its own connection: a pooled connection the server closed meanwhile would
turn a request that never left into an uncertain one. Every answer is read within limits
(runs.tools.bounded: at most max_response_bytes, the whole call within its seconds); past
them a write's outcome is unknown and a read is transient.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode

import requests
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import MaxRetryError, NewConnectionError

from control.foundation.canonical import content_hash
from control.foundation.strictjson import StrictJSONError, parse_strict
from runs.tools.bounded import DEFAULT_LIMITS, AnswerLimits, LimitExceeded, exchange
from runs.tools.calls import Timeout
from runs.tools.errors import (
    BusinessRejection,
    IdempotencyConflict,
    InvalidArguments,
    PermissionDenied,
    ResultUncertain,
    TransientError,
)

USER_AGENT = "countersign-tools/1"
_DETAIL_SHOWN = 300
_NOT_SENT_ERRORS = (
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidHeader,
)


Redact = Callable[[str], str]


def _as_is(text: str) -> str:
    return text


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP answer: status, headers and every byte of the body (within max_response_bytes:
    a longer one is never held, see runs.tools.bounded)."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes

    @property
    def raw_response_hash(self) -> str:
        return content_hash(self.body)

    def json(self) -> Any:
        """The body parsed strictly (duplicate keys, NaN refused); ValueError otherwise."""
        return parse_strict(self.body)

    def problem(self, *, redact: Redact = _as_is) -> tuple[str | None, str]:
        """(type, detail) of an error body: problem+json's {"type", "detail"}, Stripe's
        {"error": {"type", "message"}}, a bare {"message"} or {"error": "..."}; any other
        body's first bytes as its detail. The detail redacted whole, then shortened (a
        secret cut in two would slip past)."""
        try:
            data = self.json()
        except StrictJSONError:
            data = None
        if not isinstance(data, dict):
            return None, redact(self.body.decode("utf-8", "replace"))[:_DETAIL_SHOWN]
        nested = error if isinstance(error := data.get("error"), dict) else {}
        problem_type = _first_text(data.get("type"), nested.get("type"), nested.get("code"))
        detail = _first_text(
            data.get("detail"), nested.get("message"), data.get("message"), data.get("error")
        )
        return problem_type, redact(detail or "")[:_DETAIL_SHOWN]


def _first_text(*values: Any) -> str | None:
    return next((value for value in values if isinstance(value, str) and value), None)


def _check_timeout(timeout: Timeout) -> None:
    if (
        not isinstance(timeout, tuple)
        or len(timeout) != 2
        or not all(isinstance(part, int | float) and part > 0 for part in timeout)
    ):
        raise ValueError(f"timeout must be (connect seconds, read seconds) > 0, not {timeout!r}")


def _never_sent(error: requests.exceptions.ConnectionError) -> bool:
    """Did the connection fail before any byte of the request was sent?"""
    reason = error.args[0] if error.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    # Refused, unreachable, DNS failure: urllib3 had no connection to send on.
    return isinstance(reason, NewConnectionError)


def encode_body(body: Any) -> bytes:
    """The JSON bytes a body is sent as (and an HMAC signature is computed over)."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def encode_form(body: Mapping[str, Any]) -> bytes:
    """A table as application/x-www-form-urlencoded bytes, nested the way Stripe's API reads
    them: `metadata[order]=7`, `items[0][price]=p_1`; true/false as words, None left out
    (the field is not sent). Pairs in the table's order, which the template fixes."""
    return urlencode(list(_form_pairs(body, prefix=""))).encode("ascii")


def _form_pairs(value: Any, *, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _form_pairs(item, prefix=f"{prefix}[{key}]" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _form_pairs(item, prefix=f"{prefix}[{index}]")
    elif isinstance(value, bool):
        yield prefix, "true" if value else "false"
    elif value is not None:
        yield prefix, str(value)


# What a body is sent as: its Content-Type and its bytes (http kind's `body_encoding`).
# JSON's is the request's default, application/json, unless the connector's headers name
# another JSON type (application/merge-patch+json); form and text set theirs.
BODY_ENCODINGS: dict[str, tuple[str | None, Callable[[Any], bytes]]] = {
    "json": (None, encode_body),
    "form": ("application/x-www-form-urlencoded", encode_form),
    "text": ("text/plain; charset=utf-8", lambda body: str(body).encode("utf-8")),
}


def _request(
    method: str,
    url: str,
    *,
    timeout: Timeout,
    limits: AnswerLimits,
    data: bytes | None = None,
    params: dict[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    _check_timeout(timeout)
    all_headers = {
        "Accept": "application/json",
        # A compressed answer is a small stream that decodes into a large one.
        "Accept-Encoding": "identity",
        "User-Agent": USER_AGENT,
        **(headers or {}),
    }
    if data is not None:
        all_headers.setdefault("Content-Type", "application/json")
    # Not following redirects: a POST turned into a GET elsewhere is no answer to it.
    answer = exchange(
        method,
        url,
        timeout=timeout,
        limits=limits,
        data=data,
        params=params,
        headers=all_headers,
        allow_redirects=False,
    )
    return HttpAnswer(
        status=answer.status, headers=CaseInsensitiveDict(answer.headers), body=answer.body
    )


def check_header_value(name: str, value: str) -> None:
    """A value that can travel in a header, or InvalidArguments before anything is sent."""
    if not value.isascii() or not value.isprintable():
        raise InvalidArguments(
            f"the {name} value must be printable ASCII to travel in a header", field=name
        )


def send_write(
    method: str,
    url: str,
    *,
    body: Any,
    timeout: Timeout,
    idempotency_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    params: dict[str, str] | None = None,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> HttpAnswer:
    """Send a write (body as JSON, or data already encoded); TransientError only when it
    provably never left, else ResultUncertain (also for an answer past `limits`: what it
    said is unknown)."""
    headers = dict(headers or {})
    if idempotency_key is not None:
        check_header_value("idempotency_key", idempotency_key)
        headers["Idempotency-Key"] = idempotency_key
    if data is None and body is not None:
        data = encode_body(body)
    try:
        return _request(
            method, url, data=data, params=params, headers=headers, timeout=timeout, limits=limits
        )
    except LimitExceeded as error:
        raise ResultUncertain(f"the answer from {url} was cut off: {error}") from error
    except requests.exceptions.ConnectTimeout as error:
        raise TransientError(f"could not connect to {url} in time: {error}") from error
    except requests.exceptions.ConnectionError as error:
        if _never_sent(error):
            raise TransientError(f"could not connect to {url}: {error}") from error
        raise ResultUncertain(f"connection to {url} failed after sending: {error}") from error
    except requests.exceptions.Timeout as error:
        raise ResultUncertain(f"no answer from {url} in time: {error}") from error
    except (
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.ContentDecodingError,
    ) as error:
        raise ResultUncertain(f"the answer from {url} was cut short: {error}") from error
    except _NOT_SENT_ERRORS as error:
        raise TransientError(f"cannot send to {url}: {error}") from error
    except requests.exceptions.RequestException as error:
        raise ResultUncertain(f"sending to {url} failed: {error}") from error


def send_read(
    url: str,
    *,
    timeout: Timeout,
    params: dict[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> HttpAnswer:
    """A GET; any transport failure, or an answer past `limits`, is transient, since
    reading changes nothing."""
    try:
        return _request("GET", url, params=params, headers=headers, timeout=timeout, limits=limits)
    except LimitExceeded as error:
        raise TransientError(f"the answer from {url} was cut off: {error}") from error
    except requests.exceptions.RequestException as error:
        raise TransientError(f"could not read {url}: {error}") from error


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None if unusable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - time.time())


def raise_for_status(answer: HttpAnswer, *, write: bool, redact: Redact = _as_is) -> None:
    """Classify a non-2xx answer. Whether an answered transient failure may be sent again is
    not decided here but by the tool's effect class (Tool.outcome_unknown_after)."""
    status = answer.status
    if 200 <= status < 300:
        return
    problem_type, detail = answer.problem(redact=redact)
    message = f"HTTP {status}" + (f" {problem_type}" if problem_type else "")
    message += f": {detail}" if detail else ""
    if status == 429:
        raise TransientError(
            message,
            retry_after=retry_after_seconds(answer.headers.get("Retry-After")),
            http_status=status,
        )
    if status >= 500 or status == 408:
        raise TransientError(
            message,
            retry_after=retry_after_seconds(answer.headers.get("Retry-After")),
            http_status=status,
        )
    if status in (401, 403):
        raise PermissionDenied(message, http_status=status)
    if status == 404:
        raise InvalidArguments(f"unknown target ({message})", field="target", http_status=status)
    if status == 409:
        raise BusinessRejection(message, http_status=status)
    if status == 422 and problem_type == "idempotency_conflict":
        raise IdempotencyConflict(message, http_status=status)
    if 400 <= status < 500:
        raise InvalidArguments(message, http_status=status)
    # 1xx and 3xx: not the answer a call expects.
    if write:
        raise ResultUncertain(
            f"unexpected {message}", raw_response_hash=answer.raw_response_hash, http_status=status
        )
    raise TransientError(f"unexpected {message}", http_status=status)


def read_json(answer: HttpAnswer) -> Any:
    """The JSON of a 2xx read answer; a malformed one is transient (read again)."""
    try:
        return answer.json()
    except ValueError as error:
        raise TransientError(
            f"HTTP {answer.status} with a malformed body: {error}", http_status=answer.status
        ) from error
