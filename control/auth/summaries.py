"""Failed logins summarized: one `auth.login_failures` audit entry per period, not one a failure.

An anonymous flood must not grow the audit chain (nor queue on its lock) at its own pace. So
the failures are kept as LoginFailure rows while they can still count or lock, then folded
into one entry (how many, when, by which usernames and addresses) and deleted. The throttle
calls this on each failure, and the sweep on each pass.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from control.auth.clients import ANONYMOUS
from control.foundation.audit import audit_record
from control.models import AuditChainHead, LoginFailure

# How many usernames and addresses with the most failures a summary names.
SUMMARY_TOP = 10


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
