"""Errors of the agent API as RFC 9457 `application/problem+json`, one stable type per error.

Every refusal the API answers carries `type` (`urn:countersign:problem:<code>`), `title`,
`status`, `detail` and `code` (the same `<code>`, for clients that switch on a plain string),
plus extensions where they help: `rule` and `path` for a body the strict parser refused,
`errors` for schema validation. Status choices, documented in the OpenAPI description:

- 400: the body is not acceptable JSON (strict parser), or the Idempotency-Key is malformed;
- 401: missing, unknown or revoked token;
- 403: not allowed;
- 404: no such object for this tenant (another tenant's objects are 404 too, never 403);
- 409: the state does not allow it now (invalid_transition, stale_state, grant_mismatch,
  lease conflicts, definition_changed: the server's tool definition changed under the same
  contract version, unsigned_rows: the run's intents or grants in the database differ from
  what its last checkpoint signed, so nothing more is signed until a person recovers it), or
  the same Idempotency-Key is still in flight;
- 422: well-formed JSON that means something invalid (validation_error, invalid_arguments,
  missing_evidence, intent_conflict), or an Idempotency-Key reused with another body;
- 429: the token is over its request rate (rate_limited), has too many long-polls waiting
  (too_many_long_polls), or too many requests or plans waiting for people
  (too_many_waiting); Retry-After says when to try again (control.api_kit.limits, runs.limits);
- 500: checkpoint_invalid (the stored checkpoint failed verification) or internal_error;
- 503: limits_unavailable (the limits cannot be counted, so the request is refused).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic import ConfigDict

from control.foundation.strictjson import StrictJSONError

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:countersign:problem:"


@dataclass(frozen=True)
class ProblemType:
    code: str
    status: int
    title: str

    @property
    def uri(self) -> str:
        return TYPE_PREFIX + self.code


PROBLEM_TYPES: dict[str, ProblemType] = {
    problem.code: problem
    for problem in (
        ProblemType("invalid_json", 400, "The body is not acceptable JSON"),
        ProblemType("idempotency_key_invalid", 400, "The Idempotency-Key header is malformed"),
        ProblemType("unauthorized", 401, "A valid API token is required"),
        ProblemType("not_allowed", 403, "Not allowed"),
        ProblemType("not_found", 404, "Not found"),
        ProblemType("method_not_allowed", 405, "Method not allowed"),
        ProblemType("invalid_transition", 409, "Not possible in the current state"),
        ProblemType("stale_state", 409, "Someone changed the state first"),
        ProblemType("grant_mismatch", 409, "The approval does not cover this intent"),
        ProblemType("lease_busy", 409, "Another worker holds the run"),
        ProblemType("lease_lost", 409, "The run's lease is no longer held"),
        ProblemType("already_exists", 409, "Already exists"),
        ProblemType(
            "definition_changed", 409, "The tool's definition changed under its contract version"
        ),
        ProblemType(
            "idempotency_key_in_flight", 409, "A request with this Idempotency-Key is in flight"
        ),
        ProblemType("validation_error", 422, "The request does not match its schema"),
        ProblemType("invalid_arguments", 422, "Invalid arguments"),
        ProblemType("missing_evidence", 422, "Completion needs evidence"),
        ProblemType("intent_conflict", 422, "The logical action was frozen with another digest"),
        ProblemType(
            "idempotency_key_reused", 422, "The Idempotency-Key was used for another request"
        ),
        ProblemType("rate_limited", 429, "Too many requests with this token"),
        ProblemType("too_many_long_polls", 429, "Too many long-polls of this token waiting"),
        ProblemType("unsigned_rows", 409, "The run's rows differ from its signed checkpoint"),
        ProblemType(
            "too_many_waiting", 429, "Too many requests or plans of this token waiting for people"
        ),
        ProblemType("checkpoint_invalid", 500, "The stored checkpoint failed verification"),
        ProblemType("internal_error", 500, "Internal error"),
        ProblemType("limits_unavailable", 503, "Request limits cannot be checked now"),
    )
}


class Problem(Schema):
    """An RFC 9457 problem; extensions (rule, path, errors, ...) may follow."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str


def problem_response(code: str, detail: str, **extensions: Any) -> HttpResponse:
    problem = PROBLEM_TYPES[code]
    body = {
        "type": problem.uri,
        "title": problem.title,
        "status": problem.status,
        "detail": detail,
        "code": problem.code,
        **extensions,
    }
    response = HttpResponse(
        json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False),
        status=problem.status,
        content_type=PROBLEM_CONTENT_TYPE,
    )
    response.problem_code = problem.code  # read by control.api_kit.idempotency
    return response


def problems(*statuses: int) -> dict[int, type[Problem]]:
    """`response=` entries for an operation's documented error statuses."""
    return dict.fromkeys(statuses, Problem)


class BodyNotAcceptable(ValueError):
    """A parsed body the API refuses before validation (not an object, NUL in a string)."""

    def __init__(self, code: str, rule: str, detail: str, path: str = "$") -> None:
        super().__init__(code, rule, detail, path)
        self.code = code
        self.rule = rule
        self.detail = detail
        self.path = path

    def __str__(self) -> str:
        return f"{self.detail} at {self.path}"


def body_problem(error: BaseException | None) -> HttpResponse:
    """The 400/422 for a body that could not become a request (see StrictParser)."""
    if isinstance(error, StrictJSONError):
        return problem_response("invalid_json", str(error), rule=error.rule, path=error.path)
    if isinstance(error, RequestDataTooBig):
        return problem_response(
            "invalid_json", "the body exceeds the size limit", rule="too_large", path="$"
        )
    if isinstance(error, BodyNotAcceptable):
        if error.code == "validation_error":
            return problem_response(
                error.code,
                str(error),
                errors=[{"loc": ["body", error.path], "msg": error.detail, "type": error.rule}],
            )
        return problem_response(error.code, str(error), rule=error.rule, path=error.path)
    return problem_response("invalid_json", "the body cannot be parsed", rule="syntax", path="$")


def _validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = []
    for error in exc.errors:
        entry = {key: error[key] for key in ("loc", "msg", "type") if key in error}
        entry["loc"] = [str(part) if not isinstance(part, int) else part for part in entry["loc"]]
        errors.append(entry)
    return errors


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = _validation_errors(exc)
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(str(part) for part in first["loc"])
    return problem_response("validation_error", f"{where}: {first['msg']}", errors=errors)


def _on_authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = problem_response(
        "unauthorized", "send 'Authorization: Bearer <token>' with a valid, unrevoked API token"
    )
    error = ', error="invalid_token"' if request.headers.get("Authorization") else ""
    response["WWW-Authenticate"] = f'Bearer realm="countersign"{error}'
    return response


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:
        # ninja wraps whatever the body parser raised; the cause says which rule broke.
        return body_problem(exc.__cause__)
    code = {401: "unauthorized", 403: "not_allowed", 404: "not_found", 405: "method_not_allowed"}
    return problem_response(code.get(exc.status_code, "internal_error"), str(exc))


def _on_body_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return body_problem(exc)


def _on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return problem_response("not_found", str(exc) or "not found")


# Domain codes that are named differently on the wire; every other known code is itself.
_DOMAIN_CODE_ALIASES = {"invalid_input": "invalid_arguments"}


def domain_error_handler(request: HttpRequest, exc: Exception) -> HttpResponse:
    """For the apps' domain errors (each has a stable `code`); registered by control.api."""
    code = getattr(exc, "code", "")
    code = _DOMAIN_CODE_ALIASES.get(code, code)
    if code not in PROBLEM_TYPES:
        code = "invalid_transition"
    extensions = {}
    if code == "checkpoint_invalid":
        logger.error("checkpoint refused on %s: %s", request.path, exc)
        extensions["step"] = getattr(exc, "step", "")
    elif isinstance(getattr(exc, "rule", None), str):
        extensions["rule"] = exc.rule  # GrantMismatch names the broken binding
    response = problem_response(code, str(exc), **extensions)
    if isinstance(getattr(exc, "retry_after", None), int):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("unexpected error on %s %s", request.method, request.path)
    return problem_response("internal_error", "an unexpected error occurred; it was logged")


def install_problem_handlers(api: NinjaAPI) -> None:
    """Every error the API can raise answers as problem+json, never HTML or a traceback."""
    api.add_exception_handler(Exception, _on_unexpected)
    api.add_exception_handler(Http404, _on_not_found)
    api.add_exception_handler(RequestDataTooBig, _on_body_too_big)
    api.add_exception_handler(HttpError, _on_http_error)
    api.add_exception_handler(AuthenticationError, _on_authentication_error)
    api.add_exception_handler(ValidationError, _on_validation_error)
