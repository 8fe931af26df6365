"""The receipts ledger (/receipts/): every receipt of the tenant, and where the ledger is wrong.

Views of the ledger (`?view=`):
- all: every receipt, newest first;
- unreceipted: intents that were sent (they have attempts) but hold no receipt;
- unproven: receipts whose action is neither succeeded nor satisfied;
- duplicates: receipts sharing one idempotency key (a key must prove one effect);
- mismatched: receipts whose digest, or non-blank key, differs from their intent's.

Auditors and admins of the request's tenant read it (others get 403, audited); every query
filters by that tenant, on the receipt and on its action. Pages are keyset-paginated (a page
costs the same queries on page 1 and page 1,000); `export.csv` streams a whole view.
"""

from __future__ import annotations

import csv
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from control.audit import audit_record
from control.models import Role, Tenant
from control.web import tenant_member
from runs.models import Action, Attempt, Receipt

LEDGER_ROLES = (Role.AUDITOR, Role.ADMIN)
PAGE_SIZE = 50
PROVEN_STATUSES = (Action.Status.SUCCEEDED, Action.Status.SATISFIED)


@dataclass(frozen=True)
class LedgerView:
    key: str
    title: str
    explanation: str
    of_receipts: bool = True


LEDGER_VIEWS = {
    view.key: view
    for view in (
        LedgerView("all", "All receipts", "Every receipt recorded for this tenant."),
        LedgerView(
            "unreceipted",
            "Sent without a receipt",
            "Intents that were sent (they have attempts) but hold no receipt: in flight, "
            "retrying, failed, or in doubt.",
            of_receipts=False,
        ),
        LedgerView(
            "unproven",
            "Receipts without a succeeded action",
            "Receipts whose action is neither succeeded nor satisfied.",
        ),
        LedgerView(
            "duplicates",
            "More than one receipt per key",
            "Receipts sharing one idempotency key: a key must prove exactly one effect.",
        ),
        LedgerView(
            "mismatched",
            "Receipts that do not match their intent",
            "Receipts whose intent digest, or idempotency key, differs from their action's.",
        ),
    )
}


# --- Reads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerPage:
    rows: list
    next_cursor: str = ""


def _receipts(tenant: Tenant) -> QuerySet[Receipt]:
    return Receipt.objects.filter(tenant=tenant, action__tenant=tenant).select_related("action")


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
            moment, pk = cursor.rsplit("~", 1)
            created_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
            return rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=pk))
        if view == "duplicates":
            pk, key = cursor.split("~", 1)
            return rows.filter(Q(idempotency_key__gt=key) | Q(idempotency_key=key, pk__gt=int(pk)))
        return rows.filter(pk__lt=int(cursor))
    except ValueError:
        return rows


def ledger_page(*, tenant: Tenant, view: str, after: str = "") -> LedgerPage:
    """One page of a view: one query, whatever the page or the size of the ledger."""
    rows = ledger_rows(tenant=tenant, view=view)
    if after:
        rows = _after(view, rows, after)
    found = list(rows[: PAGE_SIZE + 1])
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    return LedgerPage(found, _cursor(view, found[-1]) if more else "")


# --- CSV ---------------------------------------------------------------------------------

RECEIPT_COLUMNS = (
    "receipt_id",
    "idempotency_key",
    "intent_digest",
    "status",
    "target_version",
    "source",
    "raw_response_hash",
    "recorded_at",
    "run_id",
    "action_id",
    "action_status",
    "tool",
    "target",
    "action_idempotency_key",
    "action_intent_digest",
)
UNRECEIPTED_COLUMNS = (
    "run_id",
    "action_id",
    "action_status",
    "tool",
    "target",
    "idempotency_key",
    "intent_digest",
    "attempts",
    "last_attempt_status",
    "last_attempt_started_at",
    "last_attempt_error_class",
    "proposed_at",
)
# A cell starting with one of these is a formula to a spreadsheet; targets and receipt ids
# come from agents and external systems, so they are never trusted to be plain text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str | int:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int):
        return value
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _receipt_line(receipt: Receipt) -> list:
    action = receipt.action
    return [
        receipt.receipt_id,
        receipt.idempotency_key,
        receipt.intent_digest,
        receipt.status,
        receipt.target_version,
        receipt.source,
        receipt.raw_response_hash,
        receipt.created_at,
        action.run_id,
        action.action_id,
        action.status,
        action.tool,
        action.target,
        action.idempotency_key,
        action.intent_digest,
    ]


def _unreceipted_line(action: Action) -> list:
    return [
        action.run_id,
        action.action_id,
        action.status,
        action.tool,
        action.target,
        action.idempotency_key,
        action.intent_digest,
        action.attempt_count,
        action.last_attempt_status,
        action.last_attempt_started_at,
        action.last_attempt_error_class,
        action.created_at,
    ]


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_lines(view: LedgerView, rows: Iterable) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(RECEIPT_COLUMNS if view.of_receipts else UNRECEIPTED_COLUMNS)
    line = _receipt_line if view.of_receipts else _unreceipted_line
    for row in rows:
        yield writer.writerow([_cell(value) for value in line(row)])


# --- Pages -------------------------------------------------------------------------------


def _view_of(request: HttpRequest) -> LedgerView:
    view = LEDGER_VIEWS.get(request.GET.get("view") or "all")
    if view is None:
        raise Http404("no such view of the receipts ledger")
    return view


@require_GET
@tenant_member(*LEDGER_ROLES)
def receipt_ledger(request: HttpRequest) -> HttpResponse:
    view = _view_of(request)
    page = ledger_page(tenant=request.tenant, view=view.key, after=request.GET.get("after", ""))
    context = {
        "view": view,
        "views": LEDGER_VIEWS.values(),
        "page": page,
        "next_query": urlencode({"view": view.key, "after": page.next_cursor}),
        "export_query": urlencode({"view": view.key}),
    }
    template = "receipts/receipt_list.html"
    return render(request, f"{template}#rows" if request.htmx else template, context)


@require_GET
@tenant_member(*LEDGER_ROLES)
def receipt_export(request: HttpRequest) -> StreamingHttpResponse:
    """The whole view as CSV, streamed; each export is in the audit chain."""
    view = _view_of(request)
    audit_record(
        actor=request.user.get_username(),
        verb="receipts.export",
        tenant=request.tenant,
        object_type="receipts",
        object_id=view.key,
    )
    rows = ledger_rows(tenant=request.tenant, view=view.key).iterator(chunk_size=2000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(csv_lines(view, rows), content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="receipts-{request.tenant.name}-{view.key}-{stamp}.csv"'
    )
    return response
