"""The receipts ledger's one write: each export of it is recorded in the audit chain."""

from __future__ import annotations

from control.foundation.audit import audit_record
from control.models import Tenant


def ledger_export_record(*, tenant: Tenant, actor: str, view: str) -> None:
    """Who exported which view of the receipts ledger, before the first line is streamed."""
    audit_record(
        actor=actor, verb="receipts.export", tenant=tenant, object_type="receipts", object_id=view
    )
