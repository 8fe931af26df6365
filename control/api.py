"""The agent API under /api/v1: composed here from each app's router.

Composition root: this module may import every app. It fixes what holds for all endpoints:
bearer-token auth scoped to one tenant, the strict JSON parser for every body, problem+json
for every error, Idempotency-Key on every POST, and the OpenAPI 3.1 document at
/api/v1/openapi.json that says so.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import Http404
from ninja import NinjaAPI, Router
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder

from control.api_kit.idempotency import HEADER as IDEMPOTENCY_HEADER
from control.api_kit.idempotency import KEY_TTL
from control.api_kit.limits import ApiLimited, limit_problem
from control.api_kit.parsing import MAX_BODY_BYTES, MAX_DEPTH, StrictParser
from control.api_kit.problems import (
    PROBLEM_CONTENT_TYPE,
    PROBLEM_TYPES,
    domain_error_handler,
    install_problem_handlers,
)
from control.api_kit.tokens import TokenAuth
from control.exceptions import ControlError
from runs import limits
from runs.api import plans_router
from runs.api import router as runs_router
from runs.exceptions import RunsError

DESCRIPTION = f"""\
Countersign's agent API. Authenticate with `Authorization: Bearer <token>` (a tenant's token
from `manage.py createapitoken`); objects of other tenants answer 404.

**Errors** are `application/problem+json` (RFC 9457) with a stable `type`
(`urn:countersign:problem:<code>`) and the same `code`:
{chr(10).join(f"- `{p.code}` ({p.status}): {p.title}" for p in PROBLEM_TYPES.values())}

Bodies must be JSON objects without unknown fields, at most {MAX_BODY_BYTES} bytes and
{MAX_DEPTH} levels deep; duplicate keys, NaN/Infinity, overflowing numbers, lone surrogates
and trailing data are refused with 400 `invalid_json` naming the `rule` and `path`, and
nothing is written. Well-formed bodies that mean something invalid are 422, and so are
query parameters an operation does not declare.

**Idempotency-Key** (IETF httpapi draft) is accepted on every POST: the first response is
stored and replayed (`Idempotent-Replayed: true`) for the same key and body; the same key
with another body is 422 `idempotency_key_reused`; the same key while the first request is
in flight is 409 `idempotency_key_in_flight`. Keys are kept {KEY_TTL.total_seconds() / 3600:g}
hours. 5xx answers are not stored.

**Long-poll**: `GET /actions/{{id}}?wait=SECONDS` answers as soon as the action leaves
waiting_approval, approved, in_flight and retry_wait, or when the wait ends; a wait above
30 s is treated as 30. **Lists** are paginated with `limit` (1 to 100) and `offset`.

**Limits** per token: {settings.COUNTERSIGN_API_RATE_PER_MINUTE} requests a minute (429
`rate_limited`) and {settings.COUNTERSIGN_API_MAX_LONG_POLLS} long-polls waiting at once (429
`too_many_long_polls`; also {settings.COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS} at once per
web process, whatever the token), {settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS} requests and
{settings.COUNTERSIGN_API_MAX_WAITING_PLANS} plans waiting for people (429 `too_many_waiting`),
all with `Retry-After` in seconds; a request whose limits cannot be checked is 503
`limits_unavailable`. **Sizes**: a goal and an observation summary {limits.GOAL_MAX_CHARS}
characters, a run's plan {limits.PLAN_MAX_BYTES} bytes of canonical JSON, versions
{limits.VERSIONS_MAX_KEYS} keys with keys and values of {limits.VERSIONS_MAX_CHARS} characters
(422 `invalid_arguments`, `rule` too_large, naming the field and the limit).
"""


class _Encoder(NinjaJSONEncoder):
    def default(self, o: Any) -> Any:
        # Django's encoder cuts datetimes to milliseconds; a deadline must read back as sent.
        if isinstance(o, datetime):
            return o.isoformat()
        return super().default(o)


class _Renderer(JSONRenderer):
    encoder_class = _Encoder


class CountersignAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _document_conventions(schema)
        return schema


_IDEMPOTENCY_PARAMETER = {
    "in": "header",
    "name": IDEMPOTENCY_HEADER,
    "required": False,
    "description": "A fresh unique key per logical request, reused on its retries.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}


_PROBLEM_REF = "#/components/schemas/Problem"
_RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def _document_conventions(schema: dict[str, Any]) -> None:
    """Error answers as problem+json; the Idempotency-Key header on every POST; the limits'
    429 and 503 (with Retry-After) on every operation that takes a token."""
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if operation.get("security"):
                for status, description in ((429, "Too Many Requests"), (503, "Unavailable")):
                    responses[str(status)] = {
                        "description": description,
                        "headers": copy.deepcopy(_RETRY_AFTER_HEADER),
                        "content": {"application/json": {"schema": {"$ref": _PROBLEM_REF}}},
                    }
            if method == "post":
                operation.setdefault("parameters", []).append(copy.deepcopy(_IDEMPOTENCY_PARAMETER))
            for status, response in responses.items():
                if int(status) < 400:
                    continue
                content = response.setdefault("content", {})
                body = content.pop("application/json", {"schema": {}})
                content[PROBLEM_CONTENT_TYPE] = body


api = CountersignAPI(
    title="Countersign API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=TokenAuth(),
    parser=StrictParser(),
    renderer=_Renderer(),
)
install_problem_handlers(api)
api.add_exception_handler(ApiLimited, limit_problem)
api.add_exception_handler(RunsError, domain_error_handler)
api.add_exception_handler(ControlError, domain_error_handler)
api.add_router("", runs_router)
api.add_router("", plans_router)


# Last, so that it only catches what no router above matched.
_fallback = Router()


@_fallback.api_operation(
    ["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:unknown}", auth=None, include_in_schema=False
)
def unknown_endpoint(request, unknown: str):
    """Anything else under /api/v1/ is a problem+json 404 too, not Django's HTML page."""
    raise Http404(f"no endpoint /api/v1/{unknown}")


api.add_router("", _fallback)
