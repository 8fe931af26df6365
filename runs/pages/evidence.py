"""/receipts/evidence.zip: the evidence bundle of an auditor's filter (intents proposed in
[since, until) in the reader's time zone, or one run's), as `export_evidence` writes it,
zipped. `countersign-verify` checks it once unzipped."""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from django import forms
from django.http import FileResponse, HttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.views.decorators.http import require_GET

from control.foundation.tenancy import EVIDENCE_READER_ROLES
from control.web.pages import TenantRequest, tenant_member
from runs import services
from runs.models import Run
from runs.record.evidence_bundle import Chosen


class EvidenceFilterForm(forms.Form):
    since = forms.DateTimeField(
        label="Proposed since",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    until = forms.DateTimeField(
        label="Until",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    run = forms.UUIDField(label="Run id (optional)", required=False)

    def __init__(self, data, *, tenant) -> None:
        super().__init__(data)
        self.tenant = tenant

    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since >= until:
            raise forms.ValidationError("“since” must be before “until”.")
        run = cleaned.get("run")
        if run and not Run.objects.filter(pk=run, tenant=self.tenant).exists():
            raise forms.ValidationError(f"No run {run} here.")
        return cleaned


@require_GET
@tenant_member(*EVIDENCE_READER_ROLES)
def evidence_download(request: TenantRequest) -> HttpResponseBase:
    form = EvidenceFilterForm(request.GET, tenant=request.tenant)
    if not form.is_valid():
        problems = "; ".join(str(message) for errors in form.errors.values() for message in errors)
        return HttpResponse(
            f"Nothing exported: {problems}", status=400, content_type="text/plain; charset=utf-8"
        )
    run = form.cleaned_data["run"]
    chosen = Chosen(
        tenant=request.tenant,
        since=form.cleaned_data["since"],
        until=form.cleaned_data["until"],
        run_id=str(run) if run else None,
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"evidence-{request.tenant.name}-{stamp}"
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / name
        services.evidence_export(chosen, directory, actor=request.user.get_username())
        # On disk, not in memory: a tenant's bundle grows with its history. The file goes
        # when the response closes it.
        archive = tempfile.TemporaryFile()  # noqa: SIM115 (FileResponse closes it)
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path in sorted(directory.iterdir()):
                zipped.write(path, f"{name}/{path.name}")
    archive.seek(0)
    return FileResponse(
        archive, as_attachment=True, filename=f"{name}.zip", content_type="application/zip"
    )
