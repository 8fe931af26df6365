"""Decision links: the signed, single-use, short-lived link an "approval requested" mail
carries for each person who may decide.

A link names one action, one approver, the intent digest the mail showed, a random nonce
and its expiry, signed with Django's signing (the project's secret key, a salt of its own).
For an intent proposed in a plan it also names the plan, and the digest is the plan digest:
the link decides the whole plan, exactly the version the mail showed.
It proves only that Countersign wrote it for that person about that intent; the page it opens
decides nothing on a GET, and its POST goes through approval_decide like the inbox does.
Used once: runs.services.outreach stores its nonce under a unique constraint.

The lifetime is COUNTERSIGN_DECISION_LINK_SECONDS (default 30 minutes), never past the
request's own expiry.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core import signing
from django.urls import reverse
from django.utils import timezone

from runs.models import Action

SALT = "countersign.runs.decision-link"


class LinkRefused(Exception):
    """A link that cannot decide; `rule` is a stable word, `status` the page's HTTP status."""

    def __init__(self, rule: str, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.rule = rule
        self.status = status
        self.title = title
        self.detail = detail


@dataclass(frozen=True)
class LinkClaims:
    action_pk: str
    approver_pk: int
    intent_digest: str  # the plan digest when plan_pk is set
    nonce: str
    expires_at: datetime
    plan_pk: str | None = None


def lifetime() -> timedelta:
    return timedelta(seconds=settings.COUNTERSIGN_DECISION_LINK_SECONDS)


def decision_link_token(*, action: Action, approver_pk: int, now: datetime | None = None) -> str:
    now = now or timezone.now()
    plan = action.plan if action.plan_id else None
    decided = plan or action
    expires_at = now + lifetime()
    if decided.expires_at is not None:
        expires_at = min(expires_at, decided.expires_at)
    claims = {
        "a": str(action.pk),
        "u": approver_pk,
        "d": plan.digest if plan else action.intent_digest,
        "n": secrets.token_urlsafe(18),
        "e": int(expires_at.timestamp()),
    }
    if plan:
        claims["p"] = str(plan.pk)
    return signing.dumps(claims, salt=SALT)


def decision_link_url(*, action: Action, approver_pk: int) -> str:
    base = getattr(settings, "COUNTERSIGN_BASE_URL", "http://localhost:8000").rstrip("/")
    token = decision_link_token(action=action, approver_pk=approver_pk)
    return f"{base}{reverse('decision_link', args=[token])}"


def decision_link_read(token: str) -> LinkClaims:
    """The link's claims when its signature holds and it has not expired; else LinkRefused."""
    try:
        claims = signing.loads(token, salt=SALT)
        parsed = LinkClaims(
            action_pk=str(claims["a"]),
            approver_pk=int(claims["u"]),
            intent_digest=str(claims["d"]),
            nonce=str(claims["n"]),
            expires_at=datetime.fromtimestamp(int(claims["e"]), tz=UTC),
            plan_pk=str(claims["p"]) if "p" in claims else None,
        )
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise LinkRefused(
            "tampered",
            400,
            "This link is not valid",
            "It was changed or cut short on its way. Nothing was decided. "
            "Open the request from the inbox instead.",
        ) from None
    if parsed.expires_at <= timezone.now():
        raise LinkRefused(
            "expired",
            410,
            "This link has expired",
            "Decision links work for a short time only. Nothing was decided. "
            "If the request still waits, decide it in the inbox.",
        )
    return parsed
