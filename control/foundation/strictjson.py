"""The one strict parser for untrusted JSON (API bodies, checkpoint import).

The stdlib json module accepts things a protocol must not: duplicate keys (the last one
silently wins, so two readers may see different documents), NaN and Infinity, float literals
that overflow to infinity, lone surrogates that cannot be encoded back to UTF-8, and nesting
deep enough to exhaust the stack. `parse_strict` refuses all of them with a `StrictJSONError`
whose `rule` is stable (for API problem types and tests) and whose `path` says where.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterable
from itertools import accumulate
from typing import Any, Literal

Rule = Literal[
    "byte_order_mark",
    "duplicate_key",
    "invalid_utf8",
    "lone_surrogate",
    "non_finite_number",
    "number_overflow",
    "syntax",
    "too_deep",
    "too_large",
    "trailing_data",
]

# JSON's whitespace is exactly these four; anything else after the value is trailing data.
_SIGNIFICANT = re.compile(r"[^ \t\n\r]")
# A JSON string literal, escapes included; the unrolled loop keeps matching linear.
_STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_A_BRACKET = bytes(byte for byte in range(256) if byte not in b"[]{}")
_BRACKET_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_STRUCTURE_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.DOTALL)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A surrogate can only enter a parsed string raw (str input) or through a \uD800-\uDFFF escape.
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL_SHOWN = 40


class StrictJSONError(ValueError):
    """Untrusted JSON refused: `rule` is a stable identifier, `path` locates it ("$" = root)."""

    def __init__(self, rule: Rule, detail: str, path: str = "$") -> None:
        # All three go to args, so the error survives pickling (RQ, multiprocessing).
        super().__init__(rule, detail, path)
        self.rule = rule
        self.detail = detail
        self.path = path

    def __str__(self) -> str:
        return f"{self.detail} at {self.path}"


class _Refusal:
    """Stands in for a refused value during decoding; the walk raises it with its path.

    The stdlib hooks are called bottom-up without knowing where they are, so they leave this
    marker behind instead of raising, and `_check_values` reports it with a full path.
    """

    __slots__ = ("detail", "rule")

    def __init__(self, rule: Rule, detail: str) -> None:
        self.rule = rule
        self.detail = detail


def parse_strict(data: bytes | str, *, max_bytes: int = 1_000_000, max_depth: int = 64) -> Any:
    """Parse one JSON value from untrusted input, or raise `StrictJSONError`.

    Bytes must be UTF-8 without a byte order mark. `max_bytes` counts UTF-8 bytes (a str is
    measured as its UTF-8 encoding); `max_depth` counts nested arrays and objects, so a
    scalar has depth 0 and `[[]]` depth 2. Integers of any size come back as Python ints;
    `-0.0` and float underflow (`1e-400` -> `0.0`) are accepted as the stdlib reads them.
    """
    text = _decode(data, max_bytes=max_bytes)
    _check_depth(text, max_depth=max_depth)
    hooks = _Hooks()
    decoder = json.JSONDecoder(
        object_pairs_hook=hooks.object_from_pairs,
        parse_float=hooks.parse_float,
        parse_int=hooks.parse_int,
        parse_constant=hooks.parse_constant,
        strict=True,
    )
    try:
        value, end = decoder.raw_decode(text, _skip_whitespace(text, 0))
    except json.JSONDecodeError as error:
        # The stdlib words one message "Invalid control character at"; the position follows.
        message = error.msg.removesuffix(" at")
        detail = f"syntax error: {message} (line {error.lineno}, column {error.colno})"
        raise StrictJSONError("syntax", detail) from None
    except RecursionError:
        # Only reachable when a caller allows more depth than the interpreter's stack.
        raise StrictJSONError("too_deep", "nesting exhausts the parser's recursion") from None
    end = _skip_whitespace(text, end)
    if end != len(text):
        raise StrictJSONError("trailing_data", f"trailing data after the value (offset {end})")
    # The walk only locates problems; skip it when there can be none (the common case).
    if hooks.refused or _MAYBE_SURROGATE.search(text):
        _check_values(value)
    return value


def _skip_whitespace(text: str, position: int) -> int:
    significant = _SIGNIFICANT.search(text, position)
    return significant.start() if significant else len(text)


def _decode(data: bytes | str, *, max_bytes: int) -> str:
    if isinstance(data, str):
        # Every code point is at least one UTF-8 byte: refuse huge input before encoding it.
        if len(data) > max_bytes or len(data.encode("utf-8", "surrogatepass")) > max_bytes:
            raise StrictJSONError("too_large", f"input exceeds {max_bytes} bytes")
        if data.startswith("\ufeff"):
            raise StrictJSONError("byte_order_mark", "byte order mark before the value")
        return data
    if not isinstance(data, bytes | bytearray):
        raise TypeError(f"parse_strict takes bytes or str, not {type(data).__name__}")
    if len(data) > max_bytes:
        raise StrictJSONError("too_large", f"input exceeds {max_bytes} bytes")
    if data.startswith(codecs.BOM_UTF8):
        raise StrictJSONError("byte_order_mark", "byte order mark before the value")
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as error:
        raise StrictJSONError("invalid_utf8", f"invalid UTF-8 (byte {error.start})") from None


def _check_depth(text: str, *, max_depth: int) -> None:
    """Refuse nesting deeper than max_depth before the recursive stdlib parser sees it."""
    if text.count("[") + text.count("{") <= max_depth:
        return
    structure = _STRING_LITERAL.sub("", text).encode("utf-8", "surrogatepass")
    brackets = structure.translate(None, delete=_NOT_A_BRACKET)
    # translate/map/accumulate/max all run in C: no Python loop over a 1 MB document.
    if max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0) <= max_depth:
        return
    path = _path_of_excess_nesting(text, max_depth=max_depth)
    raise StrictJSONError("too_deep", f"nesting deeper than {max_depth}", path)


def _path_of_excess_nesting(text: str, *, max_depth: int) -> str:
    """The path of the first array or object that opens below max_depth (the slow, rare path)."""
    # One frame per open container: [state, object key or array index], where state is
    # "array", "expect_key" (after "{" or ",") or "key" (the key is known).
    frames: list[list[Any]] = []
    for match in _STRUCTURE_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            if len(frames) >= max_depth:
                return _format_path(segment for _, segment in frames)
            frames.append(["expect_key", None] if token == "{" else ["array", 0])
        elif token in ("]", "}"):
            if frames:
                frames.pop()
        elif token == ",":
            if frames and frames[-1][0] == "array":
                frames[-1][1] += 1
            elif frames:
                frames[-1] = ["expect_key", None]
        elif frames and frames[-1][0] == "expect_key":
            frames[-1] = ["key", _decode_key(token)]
    return "$"  # not reached for input the depth check refused


def _decode_key(literal: str) -> str:
    try:
        return json.loads(literal)
    except ValueError:
        return literal[1:-1]


class _Hooks:
    """The stdlib decoder's hooks for one parse; `refused` says whether a marker was left."""

    def __init__(self) -> None:
        self.refused = False

    def _refuse(self, rule: Rule, detail: str) -> _Refusal:
        self.refused = True
        return _Refusal(rule, detail)

    def object_from_pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Refusal:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    return self._refuse("duplicate_key", f"duplicate key {_quote(key)}")
                seen.add(key)
        return result

    def parse_float(self, literal: str) -> float | _Refusal:
        value = float(literal)
        if math.isinf(value):
            detail = f"number {_abbreviate(literal)} overflows a float"
            return self._refuse("number_overflow", detail)
        return value

    def parse_int(self, literal: str) -> int | _Refusal:
        try:
            return int(literal)
        except ValueError:
            # Python refuses to convert very long digit strings (sys.get_int_max_str_digits).
            detail = f"integer of {len(literal.lstrip('-'))} digits is too long"
            return self._refuse("number_overflow", detail)

    def parse_constant(self, name: str) -> _Refusal:
        return self._refuse("non_finite_number", f"non-finite number {name}")


def _check_values(value: Any) -> None:
    """Walk the parsed value without recursion, raising the first refusal in document order.

    An object with duplicate keys is reported before any of its members.
    """
    # A path is a linked list (parent, segment), turned into text only when something fails.
    stack: list[tuple[Any, tuple[Any, str | int] | None]] = [(value, None)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise StrictJSONError("lone_surrogate", "lone surrogate in string", _unwind(path))
        elif isinstance(item, dict):
            for key in item:
                if _SURROGATE.search(key):
                    detail = f"lone surrogate in key {_quote(key)}"
                    raise StrictJSONError("lone_surrogate", detail, _unwind(path))
            stack.extend((child, (path, key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((item[index], (path, index)) for index in reversed(range(len(item))))
        elif isinstance(item, _Refusal):
            raise StrictJSONError(item.rule, item.detail, _unwind(path))


def _unwind(path: tuple[Any, str | int] | None) -> str:
    segments: list[str | int] = []
    while path is not None:
        path, segment = path
        segments.append(segment)
    return _format_path(reversed(segments))


def _format_path(segments: Iterable[str | int | None]) -> str:
    parts = ["$"]
    for segment in segments:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif segment is None:
            continue
        elif len(segment) <= _LITERAL_SHOWN and _IDENTIFIER.fullmatch(segment):
            parts.append(f".{segment}")
        else:
            # Quoted, and shortened if long: a message must not echo a megabyte key.
            parts.append(f"[{_quote(segment)}]")
    return "".join(parts)


def _quote(text: str) -> str:
    """A JSON string literal that is safe to log, even for a key holding lone surrogates."""
    quoted = json.dumps(_abbreviate(text), ensure_ascii=False)
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", quoted)


def _abbreviate(text: str) -> str:
    return text if len(text) <= _LITERAL_SHOWN else text[:_LITERAL_SHOWN] + "..."
