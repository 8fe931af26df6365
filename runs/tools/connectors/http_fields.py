"""Reading the `http` kind's fields: timeouts, status classes, request templates, receipt
templates, the answer that means "no such key", and the types a read must hold.
The kind itself (runs.tools.connectors.http_kind) sends and classifies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from runs.tools.bounded import DEFAULT_MAX_RESPONSE_BYTES, AnswerLimits
from runs.tools.connectors.definition import ToolSpec, check_template
from runs.tools.connectors.fields import Fields
from runs.tools.connectors.templates import Lookup, TemplateError, check_pointer, render
from runs.tools.errors import InvalidArguments
from runs.tools.http import BODY_ENCODINGS

STATUS_CLASSES = ("transient", "invalid", "conflict", "rejected", "denied", "uncertain")

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

_DOT_SEGMENTS = ("", ".", "..")

_JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


@dataclass(frozen=True)
class Request:
    """A request template: method, path, query parameters and body."""

    method: str
    path: str
    params: dict[str, Any]
    body: Any
    # runs.tools.http.BODY_ENCODINGS: json (the default), form or text.
    body_encoding: str = "json"

    def path_for(self, lookup: Lookup) -> str:
        """The path with the call's values, each one percent-encoded path segment (a `/`,
        `?`, `#` or `%` in a value is encoded, never a separator); InvalidArguments for a
        value that would be an empty or dot segment, which a server or urllib3 resolves
        upwards out of the base path."""
        try:
            return render(self.path, lookup, quote=_path_segment)
        except TemplateError as error:
            raise InvalidArguments(f"cannot build the path: {error}", field="args") from error

    def encoded(self, lookup: Lookup) -> tuple[bytes | None, str | None]:
        """The body filled with the call's values, as bytes in its encoding, and the
        Content-Type it sets (None: the request's JSON default); (None, None) without one."""
        if self.body is None:
            return None, None
        content_type, encode = BODY_ENCODINGS[self.body_encoding]
        return encode(render(self.body, lookup)), content_type

    def query(self, lookup: Lookup) -> dict[str, str]:
        filled = render(self.params, lookup)
        return {name: str(value) for name, value in filled.items()}


def _path_segment(text: str, placeholder: str) -> str:
    if text in _DOT_SEGMENTS:
        raise InvalidArguments(
            f"{{{placeholder}}} is part of a URL path and cannot be empty, . or .. (got {text!r})",
            field=placeholder,
        )
    return quote(text, safe="")


def read_timeout(fields: Fields) -> tuple[float, float] | None:
    value = fields.raw("timeout", None)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(
            isinstance(part, int | float) and not isinstance(part, bool) and part > 0
            for part in value
        )
    ):
        raise fields.error("timeout", "must be [connect seconds, read seconds], both > 0")
    return (float(value[0]), float(value[1]))


def read_limits(fields: Fields) -> AnswerLimits:
    """max_response_bytes (default 1 MiB) and max_call_seconds (default: the call's connect
    and read timeouts added up)."""
    return AnswerLimits(
        max_bytes=fields.integer("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, minimum=1),
        max_seconds=fields.number("max_call_seconds", None, minimum=0.001),
    )


def read_status_classes(fields: Fields) -> dict[int, str]:
    table = fields.table("status", None)
    if table is None:
        return {}
    classes = {}
    for code in list(table.data):
        if not code.isdigit() or not 400 <= int(code) <= 599:
            raise table.error(code, "a status class is set for a 4xx or 5xx code")
        classes[int(code)] = table.string(code, choices=STATUS_CLASSES)
    return classes


def read_request(fields: Fields, tool: ToolSpec, *, method: str, pointers: bool = False) -> Request:
    request = Request(
        method=fields.string("method", method, choices=_METHODS),
        path=fields.string("path"),
        params=fields.raw("params", {}),
        body=fields.raw("body", None),
        body_encoding=fields.string("body_encoding", "json", choices=tuple(BODY_ENCODINGS)),
    )
    if not isinstance(request.params, dict):
        raise fields.error("params", "must be a table")
    if request.body_encoding == "form" and not isinstance(request.body, dict | None):
        raise fields.error("body", "must be a table to be sent as a form")
    if request.body_encoding == "text" and not isinstance(request.body, str | None):
        raise fields.error("body", "must be a string template to be sent as text")
    _check_path(fields, request.path)
    for name in ("path", "params", "body"):
        check_template(fields, name, getattr(request, name), tool.args_schema, pointers=pointers)
    return request


def _check_path(fields: Fields, path: str) -> None:
    """A path stays under base_url: relative, and nothing in it but path segments (the query
    string comes from `params`, where every value is encoded)."""
    if "?" in path or "#" in path:
        raise fields.error("path", "cannot hold ? or # (put query parameters in params)")
    if "://" in path or path.startswith("//"):
        raise fields.error("path", "must be relative to base_url, not a URL")
    if {".", ".."} & set(path.split("/")):
        raise fields.error("path", "cannot hold a . or .. dot segment")


def read_receipt_templates(fields: Fields, spec: ToolSpec) -> dict[str, Any]:
    table = fields.table("receipt")
    templates = {"id": _as_template(table.string("id"))}
    for name in ("status", "version", "digest", "key"):
        if table.has(name):
            templates[name] = _as_template(table.string(name))
    table.done()
    for name, template in templates.items():
        check_template(table, name, template, spec.args_schema, pointers=True)
    return templates


def _as_template(value: str) -> str:
    """A bare JSON pointer ("/id") is the template "{/id}"; anything else is a template."""
    if value.startswith("/") and "{" not in value and "}" not in value:
        return "{" + value + "}"
    return value


def read_absent(fields: Fields) -> tuple[int, str | None, Any] | None:
    table = fields.table("absent", None)
    if table is None:
        return None
    status = table.integer("status", minimum=200)
    pointer = read_pointer(table, "pointer")
    absent = (status, pointer, table.raw("equals", None))
    table.done()
    return absent


def read_pointer(fields: Fields, name: str) -> str | None:
    """An optional JSON pointer field ("/data/0"), checked."""
    pointer = fields.string(name, None)
    if pointer is not None:
        try:
            check_pointer(pointer)
        except TemplateError as error:
            raise fields.error(name, str(error)) from error
    return pointer


def read_required_types(fields: Fields) -> dict[str, type]:
    table = fields.table("require", None)
    if table is None:
        return {}
    required = {}
    for pointer in list(table.data):
        try:
            check_pointer(pointer)
        except TemplateError as error:
            raise table.error(pointer, str(error)) from error
        required[pointer] = _JSON_TYPES[table.string(pointer, choices=tuple(_JSON_TYPES))]
    return required
