"""The login throttle: failed logins counted, and the lock they trip.

Each failed login is a LoginFailure row (username case-folded, client address).
`COUNTERSIGN_LOGIN_MAX_FAILURES` failures of one username, or
`COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS` from one address, within
`COUNTERSIGN_LOGIN_WINDOW_SECONDS` lock that username or address for
`COUNTERSIGN_LOGIN_LOCK_SECONDS`. Unknown usernames lock exactly like known ones, so the lock
tells a guesser nothing about which accounts exist. Attempts refused by a lock are not counted
again. A lock is audited when it trips (`auth.login_locked`, with the counts); the failures
themselves are summarized later (control.auth.summaries), not audited one by one. A wrong
current password on the password change page counts here too (control.auth.passwords).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from control.auth.clients import ANONYMOUS
from control.auth.summaries import login_failures_summarize
from control.foundation.audit import audit_record
from control.models import LoginFailure

LOCKED_MESSAGE = (
    "Too many failed logins for this username or from your network address. "
    "Logging in is locked for %(minutes)s more minute(s); try again after that, "
    "or ask an administrator."
)
# Set by the backend when a lock refused the attempt: not a new failure to count.
REFUSED_BY_LOCK = "_countersign_refused_by_lock"


def normalized_username(username: object) -> str:
    return str(username or "").strip().casefold()[:150]


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


def minutes_left(until: datetime) -> int:
    return max(1, math.ceil((until - timezone.now()).total_seconds() / 60))


def locked_message(until: datetime) -> str:
    return LOCKED_MESSAGE % {"minutes": minutes_left(until)}


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
