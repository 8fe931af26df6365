"""Bearer-token authentication of the agent API: one tenant per token, looked up once per request.

Tokens are created by `createapitoken`, stored hashed and revocable (control.services); every
successful lookup records the token's last use. `request.auth` is the ApiToken row, so views
scope every query to `request.auth.tenant`. Each authenticated request counts once against the
token's request rate (control.api_kit.limits), before the operation runs.
"""

from __future__ import annotations

from typing import cast

from django.http import HttpRequest
from ninja.security import HttpBearer

from control.api_kit.limits import request_rate_check
from control.models import ApiToken
from control.services import api_token_authenticate

_CACHE_ATTRIBUTE = "_countersign_api_token"
_COUNTED_ATTRIBUTE = "_countersign_rate_counted"
_UNSET = object()


def request_token(request: HttpRequest) -> ApiToken | None:
    """The valid token of this request, or None; the lookup (and its last-use write) runs once."""
    cached = getattr(request, _CACHE_ATTRIBUTE, _UNSET)
    if cached is not _UNSET:
        return cast(ApiToken | None, cached)
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    row = None
    if scheme.lower() == "bearer" and token.strip():
        row = api_token_authenticate(token.strip())
    setattr(request, _CACHE_ATTRIBUTE, row)
    return row


def rate_checked_token(request: HttpRequest) -> ApiToken | None:
    """request_token, counted once per request against the token's rate; raises ApiLimited."""
    token = request_token(request)
    if token is not None and not getattr(request, _COUNTED_ATTRIBUTE, False):
        setattr(request, _COUNTED_ATTRIBUTE, True)
        request_rate_check(token)
    return token


def actor_of(token: ApiToken) -> str:
    """How events and audit entries name what a token did."""
    return f"token:{token.name}"


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`; an unknown or revoked token is a 401 problem."""

    def __call__(self, request: HttpRequest) -> ApiToken | None:
        return rate_checked_token(request)

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        return rate_checked_token(request)
