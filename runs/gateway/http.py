"""`/mcp/`: the gateway's Streamable HTTP endpoint, a Django view on the same origin.

The view authenticates the bearer token as the API does, then hands the request to the
official SDK's Streamable HTTP handler (stateless, JSON answers) as an ASGI call, on an event
loop beside this thread (async_to_sync). The tool handlers' database work comes back to this
thread (sync_to_async), so a long countersign_wait holds one server thread as the API's
long-poll does, and the app stays one WSGI app under gunicorn and the test server alike.

Sessions: a handshake-era client (protocol up to 2025-11-25) gets an `Mcp-Session-Id` with
its `initialize` answer and sends it back on every request; a 2026-07-28 client names itself
in each request's `_meta`. Either names the McpSession whose run its calls belong to.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from control.api_kit.limits import ApiLimited, limit_problem
from control.api_kit.parsing import parse_request_body
from control.api_kit.problems import BodyNotAcceptable, body_problem
from control.api_kit.tokens import rate_checked_token
from control.foundation.strictjson import StrictJSONError
from runs.gateway.sessions import Caller, session_open

SESSION_HEADER = "Mcp-Session-Id"
# The MCP spec's `_meta` key for the client's name (mcp_types.CLIENT_INFO_META_KEY).
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
# JSON-RPC's error codes for a body that is not a message, and for one with bad parameters.
PARSE_ERROR = -32700
INVALID_PARAMS = -32602


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        # Answers come with each POST: no stream stays open (spec: a GET may be 405), and
        # a session holds nothing here for a DELETE to end.
        response = HttpResponse(status=405)
        response["Allow"] = "POST"
        return response
    try:
        token = rate_checked_token(request)
    except ApiLimited as limited:
        return limit_problem(request, limited)
    if token is None:
        response = JsonResponse(
            {"error": "unauthorized", "detail": "send Authorization: Bearer <tenant API token>"},
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="countersign"'
        return response
    try:
        # The REST API's body rules, the same function: size, depth, strict JSON, no NUL.
        message = parse_request_body(request)
    except (StrictJSONError, BodyNotAcceptable, RequestDataTooBig) as error:
        return _refused_body(error)
    minted = None
    session_id = request.headers.get(SESSION_HEADER)
    if session_id is None and message.get("method") == "initialize":
        session_id = minted = secrets.token_urlsafe(24)
    caller = Caller(
        token=token,
        session_key=f"session:{session_id}" if session_id else _client_key(message),
        client_name=_client_name(message),
        base_url=request.build_absolute_uri("/").rstrip("/"),
    )
    if minted:
        session_open(caller)
    # Imported here, not at the top: every process that loads the URLconf (an RQ worker's
    # system checks, each command) would otherwise pay the SDK's ~1.6 s import.
    from runs.gateway.transport import serve

    status, headers, body = async_to_sync(serve)(caller, _scope(request), request.body)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in {"content-length", SESSION_HEADER.lower()}:
            response[name] = value
    if minted:
        response[SESSION_HEADER] = minted
    return response


def _refused_body(error: Exception) -> HttpResponse:
    """A body the REST API would refuse, refused here with the same words as a JSON-RPC error
    (the SDK's client surfaces it to the model: the id is unknown before parsing, so null)."""
    problem = json.loads(body_problem(error).content)
    code = INVALID_PARAMS if problem["code"] == "validation_error" else PARSE_ERROR
    data = {key: problem[key] for key in ("code", "rule", "path", "errors") if key in problem}
    error = {"code": code, "message": problem["detail"], "data": data}
    return JsonResponse({"jsonrpc": "2.0", "id": None, "error": error}, status=400)


def _client_name(message: dict[str, Any]) -> str:
    params = message.get("params")
    if not isinstance(params, dict):
        return ""
    info = params.get("clientInfo")  # a handshake's initialize
    if not isinstance(info, dict):
        meta = params.get("_meta")
        info = meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return name[:200] if isinstance(name, str) else ""


def _client_key(message: dict[str, Any]) -> str:
    name = _client_name(message)
    return f"client:{name}" if name else "token"


def _scope(request: HttpRequest) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.get_host(), 0),
    }
