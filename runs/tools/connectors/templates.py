"""Placeholders in connector templates, and JSON pointers into answers.

A template is any TOML value. In its strings, `{name}` stands for a value of the call:
`target`, `key` (the idempotency key), `digest` (the intent digest), `tool`, `args` (all of
them), `args.NAME`, and in a compensation `receipt.id`, `receipt.status`, `receipt.version`.
In a receipt template, `{/a/b}` is the JSON pointer /a/b into the answer. `{{` and `}}` are
literal braces.

A string that is exactly one placeholder keeps the value's type (an integer stays an integer);
if that value is an absent optional argument, the field is left out of its table. A
placeholder inside longer text is written as text, and so is every placeholder of a quoted
template (a path): there each value is quoted, even when it is the whole string.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from runs.tools.calls import ToolCall

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_NAME = re.compile(r"(target|key|digest|tool|args(\.[A-Za-z0-9_-]+)*|receipt\.(id|status|version))")
_ABSENT: Any = object()

Lookup = Callable[[str], Any]


class TemplateError(ValueError):
    """A placeholder that names nothing, or a value missing when the template is filled."""


def placeholders(template: Any) -> Iterator[str]:
    """Every placeholder name in template, in order, for checking a definition."""
    if isinstance(template, str):
        for match in _PLACEHOLDER.finditer(template):
            if match.group(1) is not None:
                yield match.group(1)
        leftover = _PLACEHOLDER.sub("", template)
        if "{" in leftover or "}" in leftover:
            raise TemplateError(f"unbalanced brace in {template!r} (write {{{{ or }}}})")
    elif isinstance(template, dict):
        for value in template.values():
            yield from placeholders(value)
    elif isinstance(template, list):
        for value in template:
            yield from placeholders(value)


def check_placeholder(name: str, *, pointers: bool, receipt: bool = False) -> None:
    """Refuse a placeholder the template's context will not have."""
    if name.startswith("/") and pointers:
        check_pointer(name)
        return
    if _NAME.fullmatch(name) and (receipt or not name.startswith("receipt.")):
        return
    raise TemplateError(f"unknown placeholder {{{name}}}")


def call_lookup(
    *, tool: str, target: str | None, args: dict[str, Any], key: str | None, digest: str | None
) -> Lookup:
    values = {"tool": tool, "target": target, "args": args, "key": key, "digest": digest}

    def lookup(name: str) -> Any:
        head, _, rest = name.partition(".")
        if head == "args" and rest:
            value: Any = args
            for part in rest.split("."):
                if not isinstance(value, dict) or part not in value:
                    return _ABSENT
                value = value[part]
            return value
        if values.get(head) is None:
            raise TemplateError(f"{{{name}}} has no value for this call")
        return values[head]

    return lookup


def lookup_of(call: ToolCall) -> Lookup:
    """The placeholders of one frozen call, all of them known."""
    return call_lookup(
        tool=call.tool,
        target=call.target,
        args=call.args,
        key=call.idempotency_key,
        digest=call.intent_digest,
    )


def pointer_lookup(document: Any, fallback: Lookup | None = None) -> Lookup:
    """Placeholders `{/pointer}` into document; others through fallback."""

    def lookup(name: str) -> Any:
        if name.startswith("/"):
            return resolve_pointer(document, name)
        if fallback is None:
            raise TemplateError(f"unknown placeholder {{{name}}}")
        return fallback(name)

    return lookup


def render(template: Any, lookup: Lookup, *, quote: Callable[[str, str], str] | None = None) -> Any:
    """The template with its placeholders filled; quote(text, placeholder) applies to text
    substitutions."""
    if isinstance(template, dict):
        filled = {name: render(value, lookup, quote=quote) for name, value in template.items()}
        return {name: value for name, value in filled.items() if value is not _ABSENT}
    if isinstance(template, list):
        filled_items = [render(value, lookup, quote=quote) for value in template]
        return [value for value in filled_items if value is not _ABSENT]
    if not isinstance(template, str):
        return template
    whole = _PLACEHOLDER.fullmatch(template)
    # Quoted text (a path) is always text: a path that is one placeholder is quoted too.
    if whole is not None and whole.group(1) is not None and quote is None:
        return lookup(whole.group(1))

    def substitute(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        value = lookup(match.group(1))
        if value is _ABSENT:
            raise TemplateError(f"{{{match.group(1)}}} is absent and cannot be written as text")
        text = value if isinstance(value, str) else _scalar_text(value, match.group(1))
        return quote(text, match.group(1)) if quote is not None else text

    return _PLACEHOLDER.sub(substitute, template)


def _scalar_text(value: Any, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TemplateError(f"{{{name}}} is not a string or an integer and cannot be text")
    return str(value)


def check_pointer(pointer: str) -> None:
    if pointer and not pointer.startswith("/"):
        raise TemplateError(f"JSON pointer {pointer!r} must start with /")
    if re.search(r"~[^01]|~$", pointer):
        raise TemplateError(f"JSON pointer {pointer!r} has a bad ~ escape")


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: the value at pointer, or the absent marker when there is none."""
    check_pointer(pointer)
    value = document
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def is_absent(value: Any) -> bool:
    return value is _ABSENT
