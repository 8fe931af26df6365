"""People logging in and being refused: throttling, and the audit rows both leave behind.

- Login throttling: each failed login is a LoginFailure row (username case-folded, client
  address). `COUNTERSIGN_LOGIN_MAX_FAILURES` failures of one username, or
  `COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS` from one address, within
  `COUNTERSIGN_LOGIN_WINDOW_SECONDS` lock that username or address for
  `COUNTERSIGN_LOGIN_LOCK_SECONDS`. Unknown usernames lock exactly like known ones, so the
  lock tells a guesser nothing about which accounts exist. `ThrottledModelBackend` enforces the
  lock on every path through `authenticate()` (site login, admin login, anything else);
  `LoginForm` and `AdminLoginForm` say so in words. Attempts refused by a lock are not
  counted again.
- Failed logins are not audited one by one: an anonymous flood must not grow the audit chain
  (nor queue on its lock) at its own pace. A lock is audited when it trips
  (`auth.login_locked`, with the counts); the failures themselves are summarized in one
  `auth.login_failures` entry per period once they are older than the window and the lock
  (`login_failures_summarize`, called on each failure and by the sweep); a successful login
  records how many failures of its username preceded it.
- Audit: login, lock, failure summaries and logout through Django's auth signals; an authorization
  failure (403) through `audit_denied`, which `AuditDeniedMiddleware` calls for every
  PermissionDenied a view raises, and `csrf_failure` for a refused form of a logged-in person.
- The client's address is REMOTE_ADDR unless `COUNTERSIGN_TRUSTED_PROXY_COUNT` says how many
  reverse proxies append to X-Forwarded-For in front of Countersign.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model, user_logged_in, user_logged_out, user_login_failed
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, Max, Min, Q
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.csrf import csrf_failure as django_csrf_failure

from control.foundation.audit import audit_record
from control.models import AuditChainHead, LoginFailure

ANONYMOUS = "anonymous"
LOCKED_MESSAGE = (
    "Too many failed logins for this username or from your network address. "
    "Logging in is locked for %(minutes)s more minute(s); try again after that, "
    "or ask an administrator."
)
# Marks a request whose refusal is already in the audit chain, so it is recorded once.
_DENIAL_AUDITED = "_countersign_denial_audited"
# Set by the backend when a lock refused the attempt: not a new failure to count.
_REFUSED_BY_LOCK = "_countersign_refused_by_lock"
# How many usernames and addresses with the most failures a summary names.
SUMMARY_TOP = 10


# --- Who is asking -----------------------------------------------------------------------


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


def normalized_username(username: object) -> str:
    return str(username or "").strip().casefold()[:150]


def _actor(request: HttpRequest | None) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user.get_username()
    return ANONYMOUS


# --- Throttling --------------------------------------------------------------------------


def login_locked_until(*, username: str, address: str) -> datetime | None:
    """Until when a lock on this username or address refuses logins; None when none does."""
    now = timezone.now()
    locks = Q(username=normalized_username(username), locks_username_until__gt=now)
    if address:
        locks |= Q(address=address, locks_address_until__gt=now)
    ends = [
        until
        for pair in LoginFailure.objects.filter(locks).values_list(
            "locks_username_until", "locks_address_until"
        )
        for until in pair
        if until is not None and until > now
    ]
    return max(ends, default=None)


def _minutes_left(until: datetime) -> int:
    return max(1, math.ceil((until - timezone.now()).total_seconds() / 60))


def locked_message(until: datetime) -> str:
    return LOCKED_MESSAGE % {"minutes": _minutes_left(until)}


def _kept_for() -> timedelta:
    """How long a failure can still count or lock: the window, or the lock if longer."""
    return timedelta(
        seconds=max(
            settings.COUNTERSIGN_LOGIN_WINDOW_SECONDS, settings.COUNTERSIGN_LOGIN_LOCK_SECONDS
        )
    )


def login_failures_summarize() -> int:
    """Moves the failures that can no longer count into one `auth.login_failures` audit
    entry (how many, when, by which usernames and addresses), and deletes them; returns how
    many. Runs only once the oldest is a second period old, so an entry covers at least one
    period: a flood of failures writes a few entries a day, not one per failure."""
    kept_for = _kept_for()
    now = timezone.now()
    if not LoginFailure.objects.filter(created_at__lt=now - 2 * kept_for).exists():
        return 0
    with transaction.atomic():
        # Summarizers queue on the chain's head, so each failure is summarized once.
        AuditChainHead.objects.select_for_update().get_or_create(id=1)
        expired = LoginFailure.objects.filter(created_at__lt=now - kept_for)
        totals = expired.aggregate(
            failures=Count("pk"),
            first=Min("created_at"),
            last=Max("created_at"),
            usernames=Count("username", distinct=True),
            addresses=Count("address", distinct=True),
            locks=Count(
                "pk",
                filter=Q(locks_username_until__isnull=False) | Q(locks_address_until__isnull=False),
            ),
        )
        if not totals["failures"]:
            return 0
        audit_record(
            actor=ANONYMOUS,
            verb="auth.login_failures",
            object_type="login",
            reason=f"{totals['failures']} failed logins, summarized",
            data={
                **totals,
                "first": totals["first"].isoformat(),
                "last": totals["last"].isoformat(),
                "by_username": _most_failures(expired, "username"),
                "by_address": _most_failures(expired, "address"),
            },
        )
        expired.delete()
    return totals["failures"]


def _most_failures(failures, field: str) -> dict[str, int]:
    ranked = failures.values(field).annotate(n=Count("pk")).order_by("-n", field)
    return {row[field]: row["n"] for row in ranked[:SUMMARY_TOP]}


@transaction.atomic
def login_failure_record(*, username: str, address: str) -> LoginFailure:
    """Counts one failed login; the failure that reaches a limit locks, and is audited."""
    login_failures_summarize()
    now = timezone.now()
    window = timedelta(seconds=settings.COUNTERSIGN_LOGIN_WINDOW_SECONDS)
    lock = timedelta(seconds=settings.COUNTERSIGN_LOGIN_LOCK_SECONDS)
    username = normalized_username(username)
    failure = LoginFailure.objects.create(username=username, address=address, created_at=now)
    recent = LoginFailure.objects.filter(created_at__gt=now - window)
    if address:
        counts = recent.filter(Q(username=username) | Q(address=address)).aggregate(
            by_username=Count("pk", filter=Q(username=username)),
            by_address=Count("pk", filter=Q(address=address)),
        )
    else:
        counts = {"by_username": recent.filter(username=username).count(), "by_address": 0}
    locked = []
    # >= rather than ==: two failures racing past the limit still lock.
    if counts["by_username"] >= settings.COUNTERSIGN_LOGIN_MAX_FAILURES:
        failure.locks_username_until = now + lock
        locked.append("username")
    if address and counts["by_address"] >= settings.COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS:
        failure.locks_address_until = now + lock
        locked.append("address")
    if locked:
        failure.save(update_fields=["locks_username_until", "locks_address_until"])
        audit_record(
            actor=ANONYMOUS,
            verb="auth.login_locked",
            object_type="user",
            object_id=username[:64],
            reason=f"too many failed logins; locked {' and '.join(locked)}",
            data={
                "username": username,
                "address": address,
                "locked": locked,
                "until": (now + lock).isoformat(),
                "failures": counts,
            },
        )
    return failure


class ThrottledModelBackend(ModelBackend):
    """Django's model backend, refusing every attempt while the username or address is locked.

    Raising PermissionDenied stops authenticate() before any other backend or the password
    check runs, and Django then sends user_login_failed (which does not count it again)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        until = login_locked_until(username=username or "", address=client_address(request))
        if until is not None:
            if request is not None:
                setattr(request, _REFUSED_BY_LOCK, until)
            raise PermissionDenied(locked_message(until))
        return super().authenticate(request, username=username, password=password, **kwargs)


class ThrottledLoginMixin:
    """Says in words that logging in is locked, instead of "wrong password"."""

    def clean(self):
        request = self.request
        username = self.cleaned_data.get("username") or ""
        until = login_locked_until(username=username, address=client_address(request))
        if until is not None:
            raise self._locked_error(until)
        try:
            return super().clean()
        except ValidationError:
            # The failure that reached the limit says so at once.
            until = login_locked_until(username=username, address=client_address(request))
            if until is not None:
                raise self._locked_error(until) from None
            raise

    def _locked_error(self, until: datetime) -> ValidationError:
        return ValidationError(
            LOCKED_MESSAGE, code="locked", params={"minutes": _minutes_left(until)}
        )


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    """The site's login form."""


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """The admin's login form (control/admin.py installs it)."""


# The site's login page; control/urls.py routes /accounts/login/ here, before Django's auth
# URLs, so the lock message reaches the person.
login_view = LoginView.as_view(authentication_form=LoginForm)


# --- Audit -------------------------------------------------------------------------------


@receiver(user_logged_in, dispatch_uid="countersign_audit_login")
def _audit_login(sender, request, user, **kwargs) -> None:
    # The failures this login forgets are not summarized later: its own entry counts them.
    forgotten, _ = LoginFailure.objects.filter(
        username=normalized_username(user.get_username()),
        locks_username_until__isnull=True,
        locks_address_until__isnull=True,
    ).delete()
    audit_record(
        actor=user.get_username(),
        verb="auth.login",
        object_type="user",
        object_id=str(user.pk),
        data={"address": client_address(request), "failures_before": forgotten},
    )


@receiver(user_login_failed, dispatch_uid="countersign_count_login_failed")
def _count_login_failed(sender, credentials, request=None, **kwargs) -> None:
    if request is not None and getattr(request, _REFUSED_BY_LOCK, None):
        return
    login_failure_record(
        username=normalized_username(credentials.get("username", "")),
        address=client_address(request),
    )


@receiver(user_logged_out, dispatch_uid="countersign_audit_logout")
def _audit_logout(sender, request, user, **kwargs) -> None:
    if user is None:
        return
    audit_record(
        actor=user.get_username(),
        verb="auth.logout",
        object_type="user",
        object_id=str(user.pk),
        data={"address": client_address(request)},
    )


def audit_denied(request: HttpRequest, reason: str) -> None:
    """Records that `request` was refused (403, or a 404 that hides another tenant's object).

    Views that answer 403 themselves call this; a raised PermissionDenied is recorded by
    AuditDeniedMiddleware. Each request is recorded at most once."""
    if getattr(request, _DENIAL_AUDITED, False):
        return
    setattr(request, _DENIAL_AUDITED, True)
    user = getattr(request, "user", None)
    audit_record(
        actor=_actor(request),
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
