"""The agent API's body parser: every JSON body goes through control.foundation.strictjson first.

Duplicate keys, NaN/Infinity, overflowing numbers, lone surrogates, trailing data, nesting
deeper than MAX_DEPTH and bodies over MAX_BODY_BYTES are refused (400, naming the rule and
path) before any schema or view sees them. The body must be an object. A NUL character is
refused too (422): PostgreSQL cannot store it in text or jsonb.

Query strings are as strict as bodies: a parameter the operation does not declare is a 422
(`?wiat=30` must not silently skip a long-poll).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja.params.models import Query as QuerySource
from ninja.parser import Parser

from control.api_kit.limits import ApiLimited, limit_problem
from control.api_kit.problems import BodyNotAcceptable, problem_response
from control.api_kit.tokens import rate_checked_token
from control.foundation.strictjson import parse_strict

MAX_BODY_BYTES = 1_000_000
MAX_DEPTH = 32
_ESCAPED_NUL = b"\\u0000"


_CACHE_ATTRIBUTE = "_countersign_parsed_body"


def parse_request_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body as a strictly parsed object; parsed once per request.

    Raises StrictJSONError, BodyNotAcceptable or (from Django) RequestDataTooBig.
    """
    cached = getattr(request, _CACHE_ATTRIBUTE, None)
    if cached is not None:
        return cached
    value = parse_strict(request.body, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH)
    if not isinstance(value, dict):
        raise BodyNotAcceptable(
            "invalid_json", "not_an_object", f"the body must be an object, not {_kind(value)}"
        )
    # Strict JSON has no raw control characters, so a NUL can only arrive escaped.
    if _ESCAPED_NUL in request.body:
        path = _path_of_nul(value)
        if path is not None:
            raise BodyNotAcceptable(
                "validation_error", "nul_character", "strings must not contain NUL", path
            )
    setattr(request, _CACHE_ATTRIBUTE, value)
    return value


class StrictParser(Parser):
    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        return parse_request_body(request)


def declared_query_only(run: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wraps a ninja operation's `run` (via `decorate_view`): undeclared query parameters
    are a 422 once the caller is authenticated (a 401 comes first) and within its rate."""
    signature = run.__self__.signature
    declared = frozenset(
        param.alias for param in signature.params if isinstance(param.source, QuerySource)
    )

    @functools.wraps(run)
    def wrapper(request: HttpRequest, **path_params) -> HttpResponse:
        unknown = sorted(set(request.GET) - declared)
        if not unknown:
            return run(request, **path_params)
        try:
            token = rate_checked_token(request)
        except ApiLimited as limited:
            return limit_problem(request, limited)
        if token is not None:
            return problem_response(
                "validation_error",
                f"unknown query parameter {unknown[0]!r}",
                errors=[
                    {"loc": ["query", name], "msg": "unknown parameter", "type": "extra_forbidden"}
                    for name in unknown
                ],
            )
        return run(request, **path_params)

    return wrapper


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _path_of_nul(value: Any) -> str | None:
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return path
                stack.append((child, f"{path}[{json.dumps(key[:40])}]"))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None
