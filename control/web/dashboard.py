"""The job dashboard (django-rq's pages, /django-rq/): active superusers only.

django-rq lets any staff user in, but its pages are tenant-blind: they show every tenant's
jobs with their arguments, and empty queues, delete, requeue and stop jobs. Staff here
includes tenant auditors (control/admin.py), so every django-rq URL goes through
`superuser_required`. Like the admin: anonymous visitors are sent to the admin's login, and
anyone else logged in is refused (403, audited by AuditDeniedMiddleware).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django_rq import urls as django_rq_urls

View = Callable[..., HttpResponse]


def superuser_required(view: View) -> View:
    @wraps(view)
    def gated(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not (user.is_active and user.is_superuser):
            raise PermissionDenied("the job dashboard is for superusers only")
        return view(request, *args, **kwargs)

    return gated


def dashboard_urls() -> tuple[list[URLPattern], str]:
    """django-rq's URL patterns, each behind `superuser_required`, for `include()`."""
    gated = []
    for pattern in django_rq_urls.urlpatterns:
        # A nested include would carry views this loop cannot see: refuse to start instead.
        if not isinstance(pattern, URLPattern):
            raise ImproperlyConfigured(f"django-rq's {pattern!r} cannot be gated")
        gated.append(
            URLPattern(
                pattern.pattern,
                superuser_required(pattern.callback),
                pattern.default_args,
                pattern.name,
            )
        )
    return gated, django_rq_urls.app_name
