"""What anyone may read of an error from a system behind Countersign: the text without its
secrets, in any encoding, and without the addresses of those systems.

Tool errors name the endpoint they failed to reach (`could not connect to
http://payments.internal:8080/v1/charges?token=...`), the HTTP library's own messages repeat
host, port and path, and an upstream may echo back what it was sent: a token in its error
body, percent-encoded in a URL it quotes, base64-encoded in the Basic credentials it
complains about. `redact` is the one function every path calls before such text is stored
(attempts, actions' last_error, cases) or shown (the API, the MCP gateway): each secret is
replaced by its name in every form it can travel in, then every URL, host:port pair and IPv4
address, then the connector's own hosts wherever they are left.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from urllib.parse import quote, quote_plus

HIDDEN = "[internal address]"
# Shorter values would mangle every message (and say little).
SHORTEST_SECRET = 4
# A base64 run this short matches ordinary words too often to be taken for a secret.
_SHORTEST_BASE64 = 6
_PATTERNS = (
    # scheme://anything-up-to-whitespace-or-quote
    re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+"),
    # urllib3: HTTPConnectionPool(host='10.0.0.5', port=8080) and "with url: /path?x=y"
    re.compile(r"\w*ConnectionPool\(host=[^)]*\)"),
    re.compile(r"(?<=with url: )\S+"),
    # host:port and bare IPv4 addresses
    re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"),
    re.compile(r"\b[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*:\d{2,5}\b"),
)


def redact(
    text: str,
    *,
    secrets: Mapping[str, str] | None = None,
    hosts: Iterable[str] = (),
    addresses: bool = True,
) -> str:
    """`text` with each secret (a value -> the name shown instead) replaced in every
    encoding, each of `hosts` replaced, and, with `addresses`, every URL, connection pool,
    host:port and IPv4 address replaced. Without `addresses` (a tool's answer, whose own
    URLs may be data) only the secrets and the given hosts go."""
    for value in sorted(secrets or {}, key=len, reverse=True):
        if len(value) >= SHORTEST_SECRET:
            text = _secret_pattern(value).sub((secrets or {})[value].replace("\\", "\\\\"), text)
    if addresses:
        for pattern in _PATTERNS:
            text = pattern.sub(HIDDEN, text)
    # After the URLs went whole: what is left of a host is its bare name.
    for host in sorted({host for host in hosts if host}, key=len, reverse=True):
        text = _host_pattern(host).sub(HIDDEN, text)
    return text


def redact_document(document: object, **how: object) -> object:
    """A JSON document with `redact` applied to every string in it (keys too)."""
    if isinstance(document, str):
        return redact(document, **how)  # type: ignore[arg-type]
    if isinstance(document, list):
        return [redact_document(item, **how) for item in document]
    if isinstance(document, dict):
        return {
            redact_document(key, **how): redact_document(value, **how)
            for key, value in document.items()
        }
    return document


@lru_cache(maxsize=256)
def _secret_pattern(value: str) -> re.Pattern[str]:
    forms = sorted(set(secret_forms(value)), key=len, reverse=True)
    # Hex digits of a percent-encoding may come in either case.
    return re.compile("|".join(_case_free_escapes(form) for form in forms))


def secret_forms(value: str) -> list[str]:
    """The forms a secret can travel in: as is, JSON-escaped, percent-encoded (path or query
    style, `+` for spaces) and base64 (standard and URL-safe, at any alignment inside a
    longer encoded run, as in Basic credentials `user:secret`)."""
    escaped = json.dumps(value)[1:-1]
    forms = [
        value,
        escaped,
        escaped.replace("/", "\\/"),
        json.dumps(value, ensure_ascii=False)[1:-1],
        quote(value, safe=""),
        quote(value, safe="/"),
        # As requests re-quotes a URL it was given.
        quote(value, safe="!#$%&'()*+,/:;=?@[]~"),
        quote_plus(value),
    ]
    raw = value.encode()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        # Characters holding bits of the padding before, or of whatever follows, vary
        # with the surroundings; the ones between depend on the secret alone.
        first = (offset * 8 + 5) // 6
        last = (offset + len(raw)) * 8 // 6
        core = encoded[first:last]
        if len(core) >= _SHORTEST_BASE64:
            forms += [core, core.replace("+", "-").replace("/", "_")]
    return forms


def _case_free_escapes(form: str) -> str:
    return re.sub(
        r"%([0-9A-F]{2})",
        lambda match: "%" + "".join(f"[{digit}{digit.lower()}]" for digit in match.group(1)),
        re.escape(form).replace("\\%", "%"),
    )


@lru_cache(maxsize=64)
def _host_pattern(host: str) -> re.Pattern[str]:
    # With its port: the pair is the address.
    return re.compile(rf"(?<![\w.-]){re.escape(host)}(?::\d+)?(?![\w-])", re.IGNORECASE)
