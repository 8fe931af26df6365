"""Each person's time zone: chosen on their own page, kept in their session, active for their
requests, so every moment on every page (control/templatetags/moments) is in it.

The choice is stored (control.models.Preference) and copied into the session at login and
when changed, so a request reads it without a query. "" is the server's zone (TIME_ZONE).
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from functools import cache
from typing import cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import user_logged_in
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from control.foundation.audit import audit_record
from control.models import Preference

SESSION_KEY = "countersign_time_zone"


@cache
def time_zones() -> list[str]:
    return sorted(zone_names())


@cache
def zone_names() -> frozenset[str]:
    """Every zone the system knows, for the membership test each request makes."""
    return frozenset(zoneinfo.available_timezones())


class TimeZoneForm(forms.Form):
    time_zone = forms.ChoiceField(label="Time zone", required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["time_zone"]).choices = [
            ("", f"The server's ({settings.TIME_ZONE})"),
            *[(name, name) for name in time_zones()],
        ]


class TimeZoneMiddleware:
    """Activates the person's zone for the request (the server's when none is chosen)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        chosen = request.session.get(SESSION_KEY, "") if hasattr(request, "session") else ""
        if chosen in zone_names():
            with timezone.override(zoneinfo.ZoneInfo(chosen)):
                return self.get_response(request)
        return self.get_response(request)


@receiver(user_logged_in, dispatch_uid="countersign_time_zone_at_login")
def _zone_into_session(sender, request, user, **kwargs) -> None:
    if request is None or not hasattr(request, "session"):
        return
    chosen = Preference.objects.filter(user=user).values_list("time_zone", flat=True).first()
    request.session[SESSION_KEY] = chosen or ""


@transaction.atomic
def time_zone_set(*, user, time_zone: str) -> Preference:
    if time_zone and time_zone not in zone_names():
        raise ValueError(f"{time_zone!r} is not a time zone")
    preference, _ = Preference.objects.update_or_create(
        user=user, defaults={"time_zone": time_zone}
    )
    audit_record(
        actor=user.get_username(),
        verb="user.time_zone",
        object_type="user",
        object_id=str(user.pk),
        data={"time_zone": time_zone or None},
    )
    return preference


@login_required
@require_http_methods(["GET", "POST"])
def time_zone_view(request: HttpRequest) -> HttpResponse:
    current = request.session.get(SESSION_KEY, "")
    form = TimeZoneForm(request.POST or None, initial={"time_zone": current})
    if request.method == "POST":
        if form.is_valid():
            chosen = form.cleaned_data["time_zone"]
            time_zone_set(user=request.user, time_zone=chosen)
            request.session[SESSION_KEY] = chosen
            messages.success(request, f"Times are now shown in {chosen or settings.TIME_ZONE}.")
            return redirect("time_zone")
        return render(request, "registration/time_zone.html", {"form": form}, status=422)
    return render(request, "registration/time_zone.html", {"form": form})
