"""Automatic probes of an uncertain write: query by its key, read its target, with backoff.

A matching receipt settles a case as applied; a definitive "no such key" on a tool that dedupes
settles it as not applied and the same key goes again; whatever no probe can prove reaches a
person (`open`). A reconciler may ask for one more probe (`case_probe_now`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import RECONCILER_ROLES, has_any_role
from reconciliation.exceptions import InvalidTransition, NotAllowed
from reconciliation.models import ReconciliationCase
from reconciliation.services import (
    COMPENSATION_FAILED,
    PROBE_DELAYS,
    RECONCILER,
    mark_resolved,
)
from runs.models import Action, Receipt
from runs.selectors import tenant_tool
from runs.services import protocol, recovery
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolReceipt
from runs.tools.retry import DEFAULT_POLICY

logger = logging.getLogger(__name__)
Resolution = ReconciliationCase.Resolution
CaseStatus = ReconciliationCase.Status


def _claim_probe(case_pk) -> ReconciliationCase | None:
    """Compare-and-set claim so two sweepers never probe the same case at once."""
    now = db_now()
    claimed = ReconciliationCase.objects.filter(
        pk=case_pk, status=CaseStatus.PROBING, next_probe_at__lte=now
    ).update(next_probe_at=now + timedelta(minutes=5))
    if claimed != 1:
        return None
    return ReconciliationCase.objects.select_related("action", "action__run__tenant").get(
        pk=case_pk
    )


def probe_due_cases(*, limit: int = 50) -> int:
    due = ReconciliationCase.objects.filter(
        status=CaseStatus.PROBING, next_probe_at__lte=db_now()
    ).values_list("pk", flat=True)[:limit]
    probed = 0
    for case_pk in list(due):
        try:
            probed += case_probe(case_pk=case_pk)
        except Exception:
            # One bad case never stops the others, nor the sweep's loop.
            logger.exception("probe of case %s failed", case_pk)
    return probed


def _probe(action: Action) -> tuple[dict, ToolReceipt | None, bool]:
    """One probe: query by key where the tool can, read the target where it has a read.
    Returns the finding, the receipt found, and whether the same key may go again: "not
    found" is definitive and the tool dedupes by key."""
    finding: dict = {"at": timezone.now().isoformat()}
    try:
        # A connector the tenant disabled is not asked either: finding says so, a person decides.
        tool = tenant_tool(
            tenant=action.run.tenant, name=action.tool, contract_version=action.contract_version
        )
    except tool_errors.UnsupportedTool as error:
        finding["query"] = finding["read"] = f"{error.error_class}: {error}"
        return finding, None, False
    receipt, definitive_absence = None, False
    if tool.queryable_by_key:
        try:
            with tool.contained():
                receipt = tool.query(
                    action.idempotency_key,
                    timeout=DEFAULT_POLICY.call_timeout,
                    intent_digest=action.intent_digest,
                )
            finding["query"] = receipt.to_dict() if receipt else "no receipt under this key"
            definitive_absence = receipt is None
        except tool_errors.ToolError as error:
            finding["query"] = f"{error.error_class}: {error}"
    else:
        finding["query"] = "this tool cannot be queried by key"
    try:
        with tool.contained():
            finding["read"] = tool.read(action.target, timeout=DEFAULT_POLICY.call_timeout)
    except tool_errors.ToolError as error:
        finding["read"] = f"{error.error_class}: {error}"
    resend_safe = definitive_absence and tool.dedupes_by_key and tool.retry_after_uncertain_allowed
    return finding, receipt, resend_safe


def case_probe(*, case_pk) -> bool:
    """Runs one due probe of a case; True when it probed."""
    case = _claim_probe(case_pk)
    if case is None:
        return False
    action = case.action
    finding, receipt, resend_safe = _probe(action)
    if receipt is not None and receipt.intent_digest == action.intent_digest:
        with transaction.atomic():
            protocol.receipt_record(
                action_pk=action.pk,
                lease=None,
                receipt=receipt,
                source=Receipt.Source.QUERY,
                worker=RECONCILER,
            )
            _close(case, finding, Resolution.APPLIED, "proven by a receipt found by key", receipt)
    elif receipt is None and resend_safe:
        with transaction.atomic():
            recovery.action_retry_same_key(
                action_pk=action.pk,
                lease=None,
                worker=RECONCILER,
                finding="a probe by key found no effect",
            )
            _close(
                case,
                finding,
                Resolution.NOT_APPLIED,
                "no effect under this key; sent "
                "again with the same key, which the tool deduplicates",
                None,
            )
    else:
        _record_probe(case, finding, mismatch=receipt is not None)
    return True


@transaction.atomic
def _record_probe(case: ReconciliationCase, finding: dict, *, mismatch: bool) -> None:
    case.findings = [*case.findings, finding]
    case.probes += 1
    exhausted = mismatch or case.probes >= len(PROBE_DELAYS)
    if mismatch:
        case.reason = "receipt_digest_mismatch"
    case.status = CaseStatus.OPEN if exhausted else CaseStatus.PROBING
    case.next_probe_at = (
        None if exhausted else db_now() + timedelta(seconds=PROBE_DELAYS[case.probes])
    )
    case.save(update_fields=["findings", "probes", "reason", "status", "next_probe_at"])


def _close(case, finding, resolution: str, note: str, receipt: ToolReceipt | None) -> None:
    mark_resolved(
        case,
        resolution=resolution,
        note=note,
        actor=RECONCILER,
        user=None,
        evidence=receipt.to_dict() if receipt else None,
        findings=[*case.findings, finding],
        probes=case.probes + 1,
    )


def case_probe_now(*, case: ReconciliationCase, user) -> bool:
    """A reconciler asks for a probe now: a live query by key and read of the target. A probing
    case's next probe becomes due; an open one goes back to probing for one more probe (it
    returns to the queue unless the probe proves the outcome). Returns whether this request
    probed: a sweeper may have claimed the case a moment earlier."""
    if not has_any_role(user, case.tenant, RECONCILER_ROLES):
        raise NotAllowed("only a reconciler of this tenant may probe cases")
    if case.reason == COMPENSATION_FAILED:
        raise InvalidTransition("nothing is in doubt here: the compensation failed for good")
    with transaction.atomic():
        now = db_now()
        # A probe in progress holds next_probe_at minutes ahead (see _claim_probe): leave it be.
        scheduled = timedelta(seconds=max(PROBE_DELAYS))
        cases = ReconciliationCase.objects.filter(pk=case.pk)
        updated = (
            cases.filter(status=CaseStatus.OPEN)
            | cases.filter(status=CaseStatus.PROBING, next_probe_at__lte=now + scheduled)
        ).update(status=CaseStatus.PROBING, next_probe_at=now)
        if updated != 1:
            case.refresh_from_db(fields=["status"])
            if case.status == CaseStatus.PROBING:
                raise InvalidTransition("a probe of this case is running right now; reload")
            raise InvalidTransition(f"the case is {case.status}: there is nothing to probe")
        audit_record(
            actor=user.get_username(),
            verb="case.probe_now",
            tenant=case.tenant,
            object_type="case",
            object_id=str(case.pk),
            reason="a reconciler asked for a probe now",
            data={"status": case.status, "probes": case.probes},
        )
    probed = case_probe(case_pk=case.pk)
    case.refresh_from_db()
    return probed
