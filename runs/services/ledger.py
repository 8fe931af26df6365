"""The receipts ledger's writes: each export of it, and of an evidence bundle, is recorded in
the audit chain."""

from __future__ import annotations

from pathlib import Path

from control.foundation.audit import audit_record
from control.models import Tenant
from runs.record.evidence_bundle import Chosen, bundle_write


def ledger_export_record(*, tenant: Tenant, actor: str, view: str) -> None:
    """Who exported which view of the receipts ledger, before the first line is streamed."""
    audit_record(
        actor=actor, verb="receipts.export", tenant=tenant, object_type="receipts", object_id=view
    )


def evidence_export(chosen: Chosen, directory: Path, *, actor: str) -> dict:
    """Writes the evidence bundle of `chosen` into the new `directory` (atomically), then
    records who exported what; returns the bundle's manifest."""
    manifest = bundle_write(chosen, directory)
    audit_record(
        actor=actor,
        verb="evidence.export",
        tenant=chosen.tenant,
        object_type="tenant",
        object_id=str(chosen.tenant.pk),
        data={"filter": chosen.described(), "counts": manifest["body"]["counts"]},
    )
    return manifest
