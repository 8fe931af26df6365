"""The audit page (/audit/): the tenant's audit entries for its auditors and admins.

Filters by who (the actor), what (the verb), on what (object type and id) and when (since,
until, in the reader's time zone); newest first, keyset pages by sequence number, so page 1
and page 1,000 cost the same queries. Each entry shown is hashed again and compared with its
stored hash; the whole chain (every tenant's entries and its signed head, as `verify_audit`
walks it) is verified on request, as that walk grows with the chain.

Export (CSV or JSON lines) writes every entry the filter matches, oldest first (the chain's
order), streamed; each export is itself an audit entry. A filter that does not parse answers
400 with its reason and exports nothing: an auditor never gets "everything" for a typo.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlencode

from django import forms
from django.db.models import QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from control.foundation.audit import (
    AuditVerdict,
    audit_record,
    audit_verify,
    entry_intact,
    exported_fields,
)
from control.foundation.tenancy import EVIDENCE_READER_ROLES
from control.models import AuditEntry, Tenant
from control.web.exports import csv_lines
from control.web.pages import TenantRequest, tenant_member

PAGE_SIZE = 50
COLUMNS = (
    "seq",
    "tenant",
    "created_at",
    "actor",
    "verb",
    "object_type",
    "object_id",
    "reason",
    "data",
    "prev_hash",
    "hash",
)


class AuditFilterForm(forms.Form):
    actor = forms.CharField(label="Who", required=False, max_length=150)
    verb = forms.ChoiceField(label="Action", required=False)
    object_type = forms.ChoiceField(label="Object", required=False)
    object_id = forms.CharField(label="Object id", required=False, max_length=64)
    since = forms.DateTimeField(
        label="Since",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    until = forms.DateTimeField(
        label="Until",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )

    def __init__(self, data=None, *, verbs: Iterable[str] = (), object_types: Iterable[str] = ()):
        super().__init__(data)
        cast(forms.ChoiceField, self.fields["verb"]).choices = [
            ("", "Any action"),
            *[(verb, verb) for verb in verbs],
        ]
        cast(forms.ChoiceField, self.fields["object_type"]).choices = [
            ("", "Anything"),
            *[(kind, kind) for kind in object_types],
        ]

    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            raise forms.ValidationError("'Since' is after 'Until': nothing could match.")
        return cleaned

    def problem(self) -> str:
        return " ".join(
            f"{self.fields[name].label if name in self.fields else 'Filter'}: {error}"
            for name, errors in self.errors.items()
            for error in errors
        )

    def query(self) -> dict[str, str]:
        """The filter as it was given, for the links that keep it (pages, exports)."""
        return {name: str(self.data[name]) for name in self.fields if self.data.get(name)}


def tenant_entries(tenant: Tenant) -> QuerySet[AuditEntry]:
    return AuditEntry.objects.filter(tenant=tenant)


def _choices(tenant: Tenant) -> tuple[list[str], list[str]]:
    """The verbs and object types the tenant's entries use, in one query."""
    pairs = tenant_entries(tenant).values_list("verb", "object_type").distinct()
    verbs, types = set(), set()
    for verb, object_type in pairs:
        verbs.add(verb)
        if object_type:
            types.add(object_type)
    return sorted(verbs), sorted(types)


# Each filter and the lookup it makes.
LOOKUPS = {
    "actor": "actor__iexact",
    "verb": "verb",
    "object_type": "object_type",
    "object_id": "object_id",
    "since": "created_at__gte",
    "until": "created_at__lte",
}


def filtered(tenant: Tenant, form: AuditFilterForm) -> QuerySet[AuditEntry]:
    given = {name: form.cleaned_data[name] for name in LOOKUPS if form.cleaned_data[name]}
    return tenant_entries(tenant).filter(
        **{
            LOOKUPS[name]: value.strip() if isinstance(value, str) else value
            for name, value in given.items()
        }
    )


@dataclass(frozen=True)
class ShownEntry:
    entry: AuditEntry
    intact: bool

    @property
    def data_json(self) -> str:
        return json.dumps(self.entry.data, indent=2, sort_keys=True, ensure_ascii=False)


def _form(request: TenantRequest) -> AuditFilterForm:
    verbs, types = _choices(request.tenant)
    form = AuditFilterForm(request.GET, verbs=verbs, object_types=types)
    form.is_valid()
    return form


def _before(request: TenantRequest) -> int | None:
    try:
        return int(request.GET.get("before", ""))
    except ValueError:
        return None


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def audit_log(request: TenantRequest) -> HttpResponse:
    form = _form(request)
    rows: list[ShownEntry] = []
    next_query = ""
    if form.is_valid():
        found = filtered(request.tenant, form).order_by("-seq")
        before = _before(request)
        if before is not None:
            found = found.filter(seq__lt=before)
        page = list(found[: PAGE_SIZE + 1])
        rows = [ShownEntry(entry, entry_intact(entry)) for entry in page[:PAGE_SIZE]]
        if len(page) > PAGE_SIZE:
            next_query = urlencode({**form.query(), "before": page[PAGE_SIZE - 1].seq})
    verdict: AuditVerdict | None = audit_verify() if request.GET.get("verify") else None
    context = {
        "form": form,
        "rows": rows,
        "altered": [row.entry.seq for row in rows if not row.intact],
        "next_query": next_query,
        "filter_query": urlencode(form.query()),
        "verdict": verdict,
    }
    template = "audit/audit_list.html"
    if request.htmx and request.GET.get("before"):
        template += "#rows"
    return render(request, template, context, status=200 if form.is_valid() else 400)


# --- Export ------------------------------------------------------------------------------


def audit_csv_lines(entries: Iterable[AuditEntry]) -> Iterator[str]:
    return csv_lines(
        COLUMNS, ([exported_fields(entry)[name] for name in COLUMNS] for entry in entries)
    )


def json_lines(entries: Iterable[AuditEntry]) -> Iterator[str]:
    for entry in entries:
        yield json.dumps(exported_fields(entry), sort_keys=True, ensure_ascii=False) + "\n"


EXPORTS = {
    "csv": (audit_csv_lines, "text/csv"),
    "jsonl": (json_lines, "application/jsonl"),
}


def _export(request: TenantRequest, kind: str) -> HttpResponseBase:
    form = _form(request)
    if not form.is_valid():
        return HttpResponse(
            f"Nothing exported. {form.problem()}\n", status=400, content_type="text/plain"
        )
    lines, content_type = EXPORTS[kind]
    audit_record(
        actor=request.user.get_username(),
        verb="audit.export",
        tenant=request.tenant,
        object_type="audit",
        data={"format": kind, "filter": form.query()},
    )
    entries = filtered(request.tenant, form).order_by("seq").iterator(chunk_size=2000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(lines(entries), content_type=content_type)
    response["Content-Disposition"] = (
        f'attachment; filename="audit-{request.tenant.name}-{stamp}.{kind}"'
    )
    return response


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def audit_export_csv(request: TenantRequest) -> HttpResponseBase:
    return _export(request, "csv")


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def audit_export_jsonl(request: TenantRequest) -> HttpResponseBase:
    return _export(request, "jsonl")
