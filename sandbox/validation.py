"""Strict reading of request bodies and headers, as a careful outside API would do it.

Duplicate keys and non-finite numbers are refused: the sandbox digests what it reads, so
two readers must never see different documents in one body.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

from sandbox.exceptions import BadRequest

# Keys are visible ASCII (they travel in an HTTP header); Countersign's keys are far shorter.
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,1000}")
MAX_AMOUNT_CENTS = 100_000_000
CURRENCY = re.compile(r"[A-Z]{3}")
CURRENCY_ANY_CASE = re.compile(r"[A-Za-z]{3}")
FORM_AMOUNT = re.compile(r"[0-9]{1,12}")
CUSTOMER = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BadRequest(f"duplicate key {key!r}", type="invalid_json")
        result[key] = value
    return result


def _refuse_constant(name: str) -> None:
    raise BadRequest(f"non-finite number {name}", type="invalid_json")


def json_object(raw: bytes, *, allowed: set[str], required: set[str]) -> dict[str, Any]:
    """The body as a JSON object holding only `allowed` keys and every `required` one."""
    try:
        body = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
        )
    except (UnicodeDecodeError, ValueError) as error:
        raise BadRequest(f"body is not valid JSON: {error}", type="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}")
    missing = sorted(required - set(body))
    if missing:
        raise BadRequest(f"missing field {missing[0]!r}")
    return body


# A form field name as Stripe's API reads it: `amount`, or `metadata[order]` one level down.
FORM_NAME = re.compile(r"([a-z_]{1,40})(?:\[([A-Za-z0-9_]{1,40})\])?")


def form_object(request: Any, *, allowed: set[str], required: set[str]) -> dict[str, Any]:
    """An application/x-www-form-urlencoded body as a table (`metadata[order]=7` nests),
    holding only `allowed` names and every `required` one. Any other body (JSON too) is
    refused, as a form-only API does."""
    content_type = request.content_type or ""
    if content_type != "application/x-www-form-urlencoded":
        raise BadRequest(
            f"body must be application/x-www-form-urlencoded, not {content_type or 'untyped'}",
            type="invalid_request",
        )
    try:
        pairs = parse_qsl(request.body.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError) as error:
        raise BadRequest(f"body is not a form: {error}", type="invalid_request") from None
    body: dict[str, Any] = {}
    for name, value in pairs:
        match = FORM_NAME.fullmatch(name)
        if match is None:
            raise BadRequest(f"malformed field name {name!r}", type="invalid_request")
        field, sub = match.groups()
        if field not in allowed:
            raise BadRequest(f"unknown field {field!r}")
        place = body.setdefault(field, {}) if sub else body
        key = sub or field
        if key in place or not isinstance(place, dict):
            raise BadRequest(f"duplicate field {name!r}", type="invalid_request")
        place[key] = value
    missing = sorted(required - set(body))
    if missing:
        raise BadRequest(f"missing field {missing[0]!r}")
    return body


def string(
    value: object, *, field: str, max_length: int, pattern: re.Pattern[str] | None = None
) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be a string")
    if not value or len(value) > max_length:
        raise BadRequest(f"{field} must be 1 to {max_length} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise BadRequest(f"{field} must match {pattern.pattern}")
    return value


def amount_cents(value: object, *, field: str = "amount_cents") -> int:
    # bool is an int in Python, never an amount.
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{field} must be an integer")
    if not 1 <= value <= MAX_AMOUNT_CENTS:
        raise BadRequest(f"{field} must be between 1 and {MAX_AMOUNT_CENTS}")
    return value


def idempotency_key(headers: Any) -> str:
    key = headers.get("Idempotency-Key")
    if key is None:
        raise BadRequest("the Idempotency-Key header is required", type="missing_idempotency_key")
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise BadRequest(
            "Idempotency-Key must be 1 to 1000 visible ASCII characters",
            type="invalid_idempotency_key",
        )
    return key
