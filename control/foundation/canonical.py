"""Canonical JSON (RFC 8785, JCS) and the protocol's identifiers built on it.

JCS treats every number as an IEEE 754 double, as JSON itself does, which has consequences a
caller must know:

- `1`, `1.0` and `1e0` serialize alike (`1`), and so do `0` and `-0.0` (`0`): a digest does
  not distinguish them. `1` and `"1"` and `true` stay distinct.
- An integer outside +/-(2**53 - 1) is written as the double it denotes when that double's
  canonical text is the integer's own digits (10**16, and every integer-looking number this
  module writes), and refused otherwise (2**53 + 1 would silently become 2**53). rfc8785
  alone refuses them all, which would make canonical output unreadable: the double 1e16 is
  written "10000000000000000", which json (and PostgreSQL's jsonb) read back as an int.
  Identifiers that need every digit must travel as strings.
- Strings are not Unicode-normalized: NFC and NFD spellings of a text give different digests.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import rfc8785

_SAFE_INTEGER = 2**53 - 1
# The separator of idempotency keys; a target may contain it (it is the one free-form part).
_KEY_SEPARATOR = ":"
# Control (Cc), invisible format (Cf) and surrogate (Cs) characters never belong in a key.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})


def canonical_json(value: Any) -> bytes:
    """RFC 8785 serialization of value as UTF-8; ValueError for what JCS cannot represent.

    Refused: NaN and infinities, integers that no double represents digit for digit,
    non-string keys, lone surrogates, and types other than None, bool, int, float, str,
    list, tuple and dict.
    """
    try:
        if _plain(value):
            # Without floats, wide integers or non-ASCII keys, JCS is exactly what the C
            # encoder writes with sorted keys and no whitespace (tests/control/test_canonical
            # holds the two equal over generated values), about ten times faster.
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        return jcs(value)
    except ValueError as error:
        # Besides its CanonicalizationError, rfc8785 lets out the UnicodeEncodeError of its
        # key sort (lone surrogates) and the ValueError of str() on a 4300+ digit integer;
        # the encoder's UTF-8 step refuses lone surrogates too.
        raise ValueError(f"value has no canonical JSON form: {error}") from error
    except RecursionError:
        raise ValueError("value has no canonical JSON form: nested too deeply") from None


def jcs(value: Any) -> bytes:
    """RFC 8785 by the reference implementation, for any value canonical_json takes."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        # Rare: only then pay for a copy with wide integers as the doubles they denote.
        return rfc8785.dumps(_wide_integers_as_doubles(value))


def _plain(value: Any) -> bool:
    """Whether value holds only what JCS and the C encoder write alike: None, bools, safe
    integers, strings, lists, tuples and dicts with ASCII string keys (ASCII keys sort the
    same by UTF-16 code units, JCS's order, as by code points, Python's). A loop over a
    stack, not a recursion: this check is the fast path's whole cost."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is dict:
            try:
                if not "".join(item).isascii():  # a non-string key raises TypeError
                    return False
            except TypeError:
                return False
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                return False
        elif not isinstance(item, str):  # str subclasses (enum members) are strings
            return False
    return True


def intent_digest(*, tool: str, target: str, args: dict[str, Any]) -> str:
    """The digest an approval binds to: "sha256:" + hex of canonical {tool, args, target}."""
    if not isinstance(tool, str) or not isinstance(target, str):
        raise TypeError("tool and target must be strings")
    if not isinstance(args, dict):
        raise TypeError(f"args must be a dict, not {type(args).__name__}")
    return content_hash(canonical_json({"tool": tool, "args": args, "target": target}))


def idempotency_key(*, run_id: str, action_id: str, target: str, contract_version: str) -> str:
    """`run_id:action_id:target:contract_version`, the key a tool call carries on every try.

    Only the target may contain ":", so the key splits back into its parts unambiguously
    (first two separators, then the last one): two different actions never share a key.
    """
    parts = {
        "run_id": run_id,
        "action_id": action_id,
        "target": target,
        "contract_version": contract_version,
    }
    for name, part in parts.items():
        if not isinstance(part, str):
            raise TypeError(f"{name} must be a string, not {type(part).__name__}")
        if not part:
            raise ValueError(f"{name} must not be empty")
        if any(_is_refused_in_key(character) for character in part):
            raise ValueError(f"{name} must not contain whitespace or control characters")
        if name != "target" and _KEY_SEPARATOR in part:
            raise ValueError(f"{name} must not contain {_KEY_SEPARATOR!r}")
    return _KEY_SEPARATOR.join((run_id, action_id, target, contract_version))


def content_hash(data: bytes) -> str:
    """Return "sha256:" + the hex SHA-256 of data, the form every hash in the protocol takes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _wide_integers_as_doubles(value: Any) -> Any:
    if isinstance(value, int) and not -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
        if not _is_spelled_as_its_double(value):
            raise ValueError("an integer beyond 2**53 whose digits no double carries exactly")
        return float(value)
    if isinstance(value, dict):
        return {key: _wide_integers_as_doubles(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_wide_integers_as_doubles(child) for child in value]
    return value


def _is_spelled_as_its_double(integer: int) -> bool:
    """Whether the nearest double's canonical text is exactly this integer's digits."""
    try:
        return rfc8785.dumps(float(integer)) == str(integer).encode()
    except OverflowError:  # beyond the largest double
        return False


def _is_refused_in_key(character: str) -> bool:
    return character.isspace() or unicodedata.category(character) in _REFUSED_CATEGORIES
