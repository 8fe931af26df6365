"""Reads of the receipts ledger (/receipts/): its views, keyset pages and CSV rows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery

from control.models import Tenant
from runs.models import (
    Action,
    Approval,
    Attempt,
    Receipt,
)

LEDGER_PAGE_SIZE = 50
PROVEN_STATUSES = (Action.Status.SUCCEEDED, Action.Status.SATISFIED)


@dataclass(frozen=True)
class LedgerPage:
    rows: list
    next_cursor: str = ""


def _receipts(tenant: Tenant) -> QuerySet[Receipt]:
    """Receipts with their action, and as `approved_by_rule` the name of the standing rule
    that approved it (null when people did), in the same query."""
    ruled = Approval.objects.filter(action=OuterRef("action"), rule__isnull=False)
    return (
        Receipt.objects.filter(tenant=tenant, action__tenant=tenant)
        .select_related("action")
        .annotate(approved_by_rule=Subquery(ruled.values("rule__name")[:1]))
    )


def _sent_without_receipt(tenant: Tenant) -> QuerySet[Action]:
    attempts = Attempt.objects.filter(action=OuterRef("pk")).order_by("-number")
    return (
        Action.objects.filter(tenant=tenant, receipt__isnull=True)
        .filter(Exists(attempts))
        .annotate(
            last_attempt_status=Subquery(attempts.values("status")[:1]),
            last_attempt_started_at=Subquery(attempts.values("started_at")[:1]),
            last_attempt_error_class=Subquery(attempts.values("error_class")[:1]),
        )
    )


def ledger_rows(*, tenant: Tenant, view: str) -> QuerySet:
    """The rows of one view, ordered as the pages walk them."""
    if view == "unreceipted":
        return _sent_without_receipt(tenant).order_by("-created_at", "-pk")
    receipts = _receipts(tenant)
    if view == "unproven":
        receipts = receipts.exclude(action__status__in=PROVEN_STATUSES)
    elif view == "duplicates":
        shared = (
            Receipt.objects.filter(tenant=tenant)
            .exclude(idempotency_key="")
            .values("idempotency_key")
            .annotate(receipts=Count("pk"))
            .filter(receipts__gt=1)
            .values("idempotency_key")
        )
        return receipts.filter(idempotency_key__in=shared).order_by("idempotency_key", "pk")
    elif view == "mismatched":
        receipts = receipts.filter(
            ~Q(intent_digest=F("action__intent_digest"))
            | (~Q(idempotency_key="") & ~Q(idempotency_key=F("action__idempotency_key")))
        )
    elif view != "all":
        raise ValueError(f"unknown ledger view {view!r}")
    return receipts.order_by("-pk")


def _cursor(view: str, row) -> str:
    if view == "unreceipted":
        return f"{row.created_at.isoformat()}~{row.pk}"
    if view == "duplicates":
        return f"{row.pk}~{row.idempotency_key}"
    return str(row.pk)


def _after(view: str, rows: QuerySet, cursor: str) -> QuerySet:
    """Rows after `cursor` in the view's order; a cursor that does not parse starts over."""
    try:
        if view == "unreceipted":
            moment, last = cursor.rsplit("~", 1)
            created_at, after = datetime.fromisoformat(moment), uuid.UUID(last)
            return rows.filter(
                Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=after)
            )
        if view == "duplicates":
            number, key = cursor.split("~", 1)
            return rows.filter(
                Q(idempotency_key__gt=key) | Q(idempotency_key=key, pk__gt=int(number))
            )
        return rows.filter(pk__lt=int(cursor))
    except ValueError:
        return rows


def ledger_page(*, tenant: Tenant, view: str, after: str = "") -> LedgerPage:
    """One page of a view: one query, whatever the page or the size of the ledger."""
    rows = ledger_rows(tenant=tenant, view=view)
    if after:
        rows = _after(view, rows, after)
    found = list(rows[: LEDGER_PAGE_SIZE + 1])
    more = len(found) > LEDGER_PAGE_SIZE
    found = found[:LEDGER_PAGE_SIZE]
    return LedgerPage(found, _cursor(view, found[-1]) if more else "")
