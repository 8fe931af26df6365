"""The receipts ledger (/receipts/): every receipt of the tenant, and where the ledger is wrong.

Views of the ledger (`?view=`):
- all: every receipt, newest first;
- unreceipted: intents that were sent (they have attempts) but hold no receipt;
- unproven: receipts whose action is neither succeeded nor satisfied;
- duplicates: receipts sharing one idempotency key (a key must prove one effect);
- mismatched: receipts whose digest, or non-blank key, differs from their intent's.

Auditors and admins of the request's tenant read it (others get 403, audited); every query
filters by that tenant, on the receipt and on its action. Pages are keyset-paginated (a page
costs the same queries on page 1 and page 1,000; the queries are in runs.selectors);
`export.csv` streams a whole view, and each export is audited (runs.services.ledger).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from control.foundation.tenancy import EVIDENCE_READER_ROLES
from control.web.exports import csv_lines
from control.web.pages import tenant_member
from runs import selectors
from runs.models import Action, Receipt
from runs.pages.evidence import EvidenceFilterForm
from runs.services import ledger_export_record


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


def csv_of(view: LedgerView, rows: Iterable) -> Iterator[str]:
    line = _receipt_line if view.of_receipts else _unreceipted_line
    header = RECEIPT_COLUMNS if view.of_receipts else UNRECEIPTED_COLUMNS
    return csv_lines(header, (line(row) for row in rows))


# --- Pages -------------------------------------------------------------------------------


def _view_of(request: HttpRequest) -> LedgerView:
    view = LEDGER_VIEWS.get(request.GET.get("view") or "all")
    if view is None:
        raise Http404("no such view of the receipts ledger")
    return view


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def receipt_ledger(request: HttpRequest) -> HttpResponse:
    view = _view_of(request)
    page = selectors.ledger_page(
        tenant=request.tenant, view=view.key, after=request.GET.get("after", "")
    )
    context = {
        "view": view,
        "views": LEDGER_VIEWS.values(),
        "page": page,
        "next_query": urlencode({"view": view.key, "after": page.next_cursor}),
        "export_query": urlencode({"view": view.key}),
        "evidence_form": EvidenceFilterForm(None, tenant=request.tenant),
    }
    template = "receipts/receipt_list.html"
    return render(request, f"{template}#rows" if request.htmx else template, context)


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def receipt_export(request: HttpRequest) -> StreamingHttpResponse:
    """The whole view as CSV, streamed; each export is in the audit chain."""
    view = _view_of(request)
    ledger_export_record(tenant=request.tenant, actor=request.user.get_username(), view=view.key)
    rows = selectors.ledger_rows(tenant=request.tenant, view=view.key).iterator(chunk_size=2000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(csv_of(view, rows), content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="receipts-{request.tenant.name}-{view.key}-{stamp}.csv"'
    )
    return response
