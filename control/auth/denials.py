"""Refusals in the audit chain: every 403 a person meets, and a logged-in person's failed CSRF.

`audit_denied` records one refusal (views that answer 403 themselves call it);
`AuditDeniedMiddleware` calls it for every PermissionDenied a view raises; `csrf_failure`
(settings.CSRF_FAILURE_VIEW) for a refused form of a logged-in person. Each request is recorded
at most once.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from control.auth.clients import client_address, request_actor
from control.foundation.audit import audit_record

# Marks a request whose refusal is already in the audit chain, so it is recorded once.
_DENIAL_AUDITED = "_countersign_denial_audited"


def audit_denied(request: HttpRequest, reason: str) -> None:
    """Records that `request` was refused (403, or a 404 that hides another tenant's object).

    Views that answer 403 themselves call this; a raised PermissionDenied is recorded by
    AuditDeniedMiddleware. Each request is recorded at most once."""
    if getattr(request, _DENIAL_AUDITED, False):
        return
    setattr(request, _DENIAL_AUDITED, True)
    user = getattr(request, "user", None)
    audit_record(
        actor=request_actor(request),
        verb="auth.denied",
        tenant=getattr(request, "tenant", None),
        object_type="path",
        object_id=request.path[:64],
        reason=str(reason)[:500],
        data={
            "method": request.method,
            "path": request.path[:500],
            "address": client_address(request),
            "user_id": user.pk if user is not None and user.is_authenticated else None,
        },
    )


class AuditDeniedMiddleware:
    """Puts every PermissionDenied a view raises in the audit chain; Django still answers 403."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        if isinstance(exception, PermissionDenied):
            audit_denied(request, str(exception) or "permission denied")


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal, audited when a logged-in person's session sent it: that is what
    a forged cross-site request looks like. Anonymous refusals (a stale login tab) are not."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        audit_denied(request, f"CSRF check failed: {reason}")
    return django_csrf_failure(request, reason=reason)
