"""The `http` kind: tools that are requests to a JSON HTTP API.

Connection fields: base_url, headers (each value may hold `${SECRET}`s), timeout
[connect, read] seconds, max_response_bytes (default 1 MiB) and max_call_seconds (default:
connect + read) bounding every answer (runs.tools.bounded), status (status code -> class,
where the API differs from the defaults of runs.tools.http), sign (HMAC-SHA256 of the body
for webhook receivers: header and secret).

Tool fields: method, path (a template; substituted values are URL-quoted), params (query
string templates), body (a JSON template), idempotency_header (the header the API
deduplicates by, e.g. Stripe's Idempotency-Key; absent: the API does not deduplicate),
receipt (templates over the answer, or bare JSON pointers such as "/id": id, status,
version, and digest and key where the API echoes them back; without digest the receipt's
proof is the key alone), status, query (path, params, absent {status, pointer, equals} and
result, the pointer to the object in a list's answer: the request that finds the receipt
stored under a key), read (path, params, require {pointer = type}, result template: the
target's current state). A read_only tool's call is a GET whose answer makes the receipt.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from runs.tools.bounded import AnswerLimits
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.connectors.definition import ConnectorSpec, ToolSpec, check_template, tool_spec
from runs.tools.connectors.fields import Fields
from runs.tools.connectors.http_fields import (
    Request,
    read_absent,
    read_limits,
    read_pointer,
    read_receipt_templates,
    read_request,
    read_required_types,
    read_status_classes,
    read_timeout,
)
from runs.tools.connectors.templates import (
    Lookup,
    TemplateError,
    call_lookup,
    is_absent,
    lookup_of,
    pointer_lookup,
    render,
    resolve_pointer,
)
from runs.tools.connectors.tool import ConnectorTool
from runs.tools.errors import (
    BusinessRejection,
    IdempotencyConflict,
    InvalidArguments,
    PermissionDenied,
    ReceiptMismatch,
    ResultUncertain,
    ToolError,
    TransientError,
)
from runs.tools.http import (
    HttpAnswer,
    check_header_value,
    raise_for_status,
    read_json,
    retry_after_seconds,
    send_read,
    send_write,
)
from runs.tools.retry import RetryPolicy


@dataclass(frozen=True)
class Connection:
    base_url: str
    headers: dict[str, str]
    timeout: tuple[float, float] | None
    status: dict[int, str]
    sign_header: str | None
    sign_secret: bytes | None
    limits: AnswerLimits

    def url(self, path: str) -> str:
        """base_url joined with a rendered path, refused unless it stays under base_url:
        same scheme and host, under its path, no query or fragment and no dot segment (the
        one check every request passes, whatever its template)."""
        url = self.base_url.rstrip("/") + "/" + path.lstrip("/")
        base, joined = urlsplit(self.base_url), urlsplit(url)
        segments = joined.path.split("/")
        if (
            (joined.scheme, joined.netloc) != (base.scheme, base.netloc)
            or not joined.path.startswith(base.path.rstrip("/") + "/")
            or joined.query
            or joined.fragment
            or "." in segments
            or ".." in segments
        ):
            raise InvalidArguments("the request path would leave the connector's base URL")
        return url

    def signed(self, data: bytes) -> dict[str, str]:
        if self.sign_header is None or self.sign_secret is None:
            return {}
        mac = hmac.new(self.sign_secret, data, hashlib.sha256).hexdigest()
        return {self.sign_header: f"sha256={mac}"}


def connection(spec: ConnectorSpec, fields: Fields) -> Any:
    base_url = fields.string("base_url")
    if not base_url.startswith(("http://", "https://")):
        raise fields.error("base_url", "must start with http:// or https://")
    if urlsplit(base_url).query or urlsplit(base_url).fragment:
        raise fields.error("base_url", "cannot hold a query or fragment (put them in params)")
    spec.secrets.reach(base_url)
    headers = fields.string_map("headers")
    for name, value in headers.items():
        try:
            check_header_value(name, value)
        except InvalidArguments as error:
            raise fields.error(f"headers.{name}", spec.secrets.scrub(error.message)) from error
    sign = fields.table("sign", None)
    sign_header = sign_secret = None
    if sign is not None:
        sign_header = sign.string("header")
        sign_secret = sign.string("secret").encode()
        sign.done()
    shared = Connection(
        base_url=base_url,
        headers=headers,
        timeout=read_timeout(fields),
        status=read_status_classes(fields),
        sign_header=sign_header,
        sign_secret=sign_secret,
        limits=read_limits(fields),
    )

    def build(label: str, tool_fields: Fields, raw: dict[str, Any]) -> HttpTool:
        return HttpTool(tool_spec(spec, label, tool_fields, raw), tool_fields, shared)

    return build


class HttpTool(ConnectorTool):
    kind = "http"

    def __init__(self, spec: ToolSpec, fields: Fields, connection: Connection) -> None:
        self.connection = connection
        read_only = spec.effect_class == "read_only"
        self.request = read_request(fields, spec, method="GET" if read_only else "POST")
        self.idempotency_header = fields.string("idempotency_header", None)
        if read_only and self.idempotency_header is not None:
            raise fields.error("idempotency_header", "a read_only tool sends no idempotency key")
        self.status = {**connection.status, **read_status_classes(fields)}
        self.receipt = read_receipt_templates(fields, spec)
        query = fields.table("query", None)
        self.query_request = self.absent = self.query_result = None
        if query is not None:
            self.query_request = read_request(query, spec, method="GET")
            self.absent = read_absent(query)
            # Where the answer holds the object (a search answers a list: "/data/0").
            self.query_result = read_pointer(query, "result")
            query.done()
        read = fields.table("read", None)
        self.read_request = None
        if read is not None:
            self.read_request = read_request(read, spec, method="GET")
            self.read_require = read_required_types(read)
            self.read_result = read.raw("result", None)
            check_template(read, "result", self.read_result, spec.args_schema, pointers=True)
            read.done()
        if connection.timeout is not None:
            spec = replace(
                spec,
                retry_policy=replace(
                    spec.retry_policy or RetryPolicy(), call_timeout=connection.timeout
                ),
            )
        super().__init__(
            spec,
            dedupes_by_key=self.idempotency_header is not None,
            queryable_by_key=self.query_request is not None,
            echoes_digest="digest" in self.receipt,
        )

    def normalize(self, *, target: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Also refuses, when proposed rather than when sent, a target or argument that
        cannot be a path segment of this tool's requests."""
        target, args = super().normalize(target=target, args=args)
        # The key and digest are Countersign's own (never empty or a dot segment); any
        # stand-in shows whether the agent's values fit.
        lookup = call_lookup(tool=self.name, target=target, args=args, key="k", digest="d")
        for request in (self.request, self.read_request):
            if request is not None:
                self.connection.url(request.path_for(lookup))
        return target, args

    # Writes, and a read_only tool's one GET.

    def perform(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        if self.effect_class == "read_only":
            return self.fetched(call, timeout=timeout)[0]
        lookup = lookup_of(call)
        url = self.connection.url(self.request.path_for(lookup))
        data, content_type = self.request.encoded(lookup)
        headers = {**self.connection.headers, **self.connection.signed(data or b"")}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if self.idempotency_header is not None:
            check_header_value("idempotency_key", call.idempotency_key)
            headers[self.idempotency_header] = call.idempotency_key
        answer = send_write(
            self.request.method,
            url,
            body=None,
            data=data,
            timeout=timeout,
            headers=headers,
            params=self.request.query(lookup),
            limits=self.connection.limits,
        )
        self._raise_for_status(answer, write=True)
        try:
            document = answer.json()
        except ValueError as error:
            raise ResultUncertain(
                f"HTTP {answer.status} without a usable receipt: {error}",
                raw_response_hash=answer.raw_response_hash,
                http_status=answer.status,
            ) from error
        return self._receipt(answer, call, document=document, write=True)

    def fetched(self, call: ToolCall, *, timeout: Timeout) -> tuple[ToolReceipt, Any]:
        if self.effect_class != "read_only":
            return super().fetched(call, timeout=timeout)
        answer = self._get(self.request, lookup_of(call), timeout=timeout)
        document = read_json(answer)
        return self._receipt(answer, call, document=document, write=False), document

    def find(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None
    ) -> ToolReceipt | None:
        assert self.query_request is not None
        lookup = call_lookup(
            tool=self.name, target=None, args={}, key=idempotency_key, digest=intent_digest
        )
        answer = self._get(self.query_request, lookup, timeout=timeout, raise_errors=False)
        if self.absent is not None and _matches_absent(answer, self.absent):
            return None
        if answer.status == 404:
            # Not the API's own "no such key" (a wrong base URL?): prove nothing.
            raise TransientError(f"the query for key {idempotency_key!r} found no such endpoint")
        self._raise_for_status(answer, write=False)
        document = read_json(answer)
        if self.query_result is not None:
            document = resolve_pointer(document, self.query_result)
            if is_absent(document):
                raise TransientError(
                    f"malformed answer to the query for {idempotency_key!r}: "
                    f"nothing at {self.query_result}"
                )
        key_echo = self.receipt.get("key")
        try:
            receipt = self._build_receipt(
                answer, document, lookup, digest=intent_digest, key=idempotency_key
            )
        except ValueError as error:
            raise TransientError(f"malformed receipt for {idempotency_key!r}: {error}") from error
        if key_echo is not None and receipt.idempotency_key != idempotency_key:
            raise TransientError(f"asked for key {idempotency_key!r}, got another key's receipt")
        return receipt

    def reads_target(self) -> bool:
        return self.read_request is not None

    def observe(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        if self.read_request is None:
            return None
        lookup = call_lookup(tool=self.name, target=target, args={}, key=None, digest=None)
        answer = self._get(self.read_request, lookup, timeout=timeout)
        document = read_json(answer)
        for pointer, kind in self.read_require.items():
            value = resolve_pointer(document, pointer)
            if (
                is_absent(value)
                or not isinstance(value, kind)
                or (isinstance(value, bool) and kind is int)
            ):
                raise TransientError(
                    f"malformed answer reading {target!r}: {pointer} is not a {kind.__name__}"
                )
        if self.read_result is None:
            if not isinstance(document, dict):
                raise TransientError(f"malformed answer reading {target!r}: not an object")
            return document
        return render(self.read_result, pointer_lookup(document, lookup))

    # Plumbing.

    def _get(
        self, request: Request, lookup: Lookup, *, timeout: Timeout, raise_errors: bool = True
    ) -> HttpAnswer:
        answer = send_read(
            self.connection.url(request.path_for(lookup)),
            params=request.query(lookup),
            headers=self.connection.headers,
            timeout=timeout,
            limits=self.connection.limits,
        )
        if raise_errors:
            self._raise_for_status(answer, write=False)
        return answer

    def _raise_for_status(self, answer: HttpAnswer, *, write: bool) -> None:
        declared = self.status.get(answer.status)
        scrub = self.spec.connector.secrets.scrub
        if declared is None:
            raise_for_status(answer, write=write, redact=scrub)
            return
        problem_type, detail = answer.problem(redact=scrub)
        message = f"HTTP {answer.status}" + (f" {problem_type}" if problem_type else "")
        message += f": {detail}" if detail else ""
        raise _declared_error(declared, message, answer, write=write)

    def _build_receipt(
        self,
        answer: HttpAnswer,
        document: Any,
        lookup: Lookup,
        *,
        digest: str | None,
        key: str | None,
    ) -> ToolReceipt:
        filled = pointer_lookup(document, lookup)
        values = {name: render(template, filled) for name, template in self.receipt.items()}
        values = {name: None if is_absent(value) else value for name, value in values.items()}
        data = {
            "receipt_id": values["id"],
            "status": values.get("status", "ok"),
            "target_version": values.get("version"),
            "intent_digest": values.get("digest", digest),
            "idempotency_key": values.get("key", key),
        }
        return ToolReceipt.from_response(data, raw_response_hash=answer.raw_response_hash)

    def _receipt(
        self, answer: HttpAnswer, call: ToolCall, *, document: Any, write: bool
    ) -> ToolReceipt:
        lookup = call_lookup(
            tool=call.tool,
            target=call.target,
            args=call.args,
            key=call.idempotency_key if self.dedupes_by_key else None,
            digest=call.intent_digest,
        )
        try:
            receipt = self._build_receipt(
                answer,
                document,
                lookup,
                digest=call.intent_digest,
                key=call.idempotency_key if self.dedupes_by_key else None,
            )
        except (ValueError, TemplateError) as error:
            if not write:
                raise TransientError(
                    f"HTTP {answer.status} without a usable answer: {error}"
                ) from error
            raise ResultUncertain(
                f"HTTP {answer.status} without a usable receipt: {error}",
                raw_response_hash=answer.raw_response_hash,
                http_status=answer.status,
            ) from error
        if receipt.intent_digest != call.intent_digest:
            raise ReceiptMismatch(
                f"the receipt is for intent {receipt.intent_digest}, not {call.intent_digest}",
                receipt=receipt,
                http_status=answer.status,
            )
        if (
            self.dedupes_by_key
            and "key" in self.receipt
            and receipt.idempotency_key != call.idempotency_key
        ):
            raise ReceiptMismatch(
                f"the receipt names key {receipt.idempotency_key!r}, not {call.idempotency_key!r}",
                receipt=receipt,
                http_status=answer.status,
            )
        return receipt


def _matches_absent(answer: HttpAnswer, absent: tuple[int, str | None, Any]) -> bool:
    status, pointer, equals = absent
    if answer.status != status:
        return False
    if pointer is None:
        return True
    try:
        document = answer.json()
    except ValueError:
        return False
    return resolve_pointer(document, pointer) == equals


def _declared_error(declared: str, message: str, answer: HttpAnswer, *, write: bool) -> ToolError:
    if declared == "transient":
        return TransientError(
            message,
            retry_after=retry_after_seconds(answer.headers.get("Retry-After")),
            http_status=answer.status,
        )
    if declared == "invalid":
        return InvalidArguments(message, http_status=answer.status)
    if declared == "conflict":
        return IdempotencyConflict(message, http_status=answer.status)
    if declared == "rejected":
        return BusinessRejection(message, http_status=answer.status)
    if declared == "denied":
        return PermissionDenied(message, http_status=answer.status)
    if write:
        return ResultUncertain(
            message, raw_response_hash=answer.raw_response_hash, http_status=answer.status
        )
    return TransientError(message, http_status=answer.status)
