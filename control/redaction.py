"""What an agent may read of an error meant for operators: the text without the addresses
of the systems behind Countersign.

Tool errors name the endpoint they failed to reach (`could not connect to
http://payments.internal:8080/v1/charges?token=...`), and the HTTP library's own messages
repeat host, port and path. Operators see them whole on the run page; the agent API shows
them with every URL and host/port pair replaced, so an agent learns what went wrong but not
where the connectors live or which tokens their URLs carry.
"""

from __future__ import annotations

import re

HIDDEN = "[internal address]"
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


def without_addresses(text: str) -> str:
    """`text` with every URL, connection pool, host:port and IPv4 address replaced."""
    for pattern in _PATTERNS:
        text = pattern.sub(HIDDEN, text)
    return text
