"""Who is asking: the client's network address, and the actor an audit entry names.

The client's address is REMOTE_ADDR unless `COUNTERSIGN_TRUSTED_PROXY_COUNT` says how many
reverse proxies append to X-Forwarded-For in front of Countersign. The login throttle counts by
it, and /metrics lets in the networks it is told to (control.foundation.prometheus).
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest

ANONYMOUS = "anonymous"


def client_address(request: HttpRequest | None) -> str:
    """The client's IP address: REMOTE_ADDR, or the entry the outermost trusted proxy appended
    to X-Forwarded-For. Anything that is not an IP address counts as unknown ("")."""
    if request is None:
        return ""
    proxies = settings.COUNTERSIGN_TRUSTED_PROXY_COUNT
    candidate = request.META.get("REMOTE_ADDR", "")
    if proxies:
        # Entries left of the ones our proxies appended are the client's to invent.
        forwarded = [
            part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        ]
        if len(forwarded) >= proxies and forwarded[-proxies]:
            candidate = forwarded[-proxies]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return ""


def request_actor(request: HttpRequest | None) -> str:
    """The username of the person logged in, else ANONYMOUS."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user.get_username()
    return ANONYMOUS
