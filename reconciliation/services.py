"""Cases: opening them, and a person's resolution with evidence.

A case for an uncertain write opens in `probing` (reconciliation.probes queries the tool by
the intent's key and reads the target, with backoff); only what no probe can prove reaches the
human queue (`open`). A compensation that failed for good opens straight in `open`.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import RECONCILER_ROLES, has_any_role
from reconciliation.evidence import evidence_receipt
from reconciliation.exceptions import InvalidTransition, NotAllowed, ResolutionRefused
from reconciliation.models import ReconciliationCase
from reconciliation.selectors import case_needs_four_eyes, first_attempt_started, policy_four_eyes
from runs.models import Action, Receipt
from runs.selectors import tenant_tool
from runs.services import endings, protocol, recovery, saga
from runs.services import evidence as receipts
from runs.tools import errors as tool_errors

# Seconds before each automatic probe; after the last one a person decides.
PROBE_DELAYS = (0.0, 2.0, 8.0)
RECONCILER = "countersign.reconciler"
Resolution = ReconciliationCase.Resolution
CaseStatus = ReconciliationCase.Status
UNRESOLVED = (CaseStatus.PROBING, CaseStatus.OPEN, CaseStatus.AWAITING_SECOND)
# A compensation that failed for good: a person undoes the step by hand (applied, with
# evidence) or accepts that it stays done (abandon). Nothing is sent again.
COMPENSATION_FAILED = "compensation_failed"


def _failed_compensation(action: Action) -> bool:
    return action.status == Action.Status.FAILED and saga.is_compensation(action)


def case_open(*, action: Action) -> ReconciliationCase | None:
    """Opens the case for an uncertain action (probed first), or for a compensation that
    failed for good (straight to a person: nothing is in doubt, something was not undone);
    None when there is nothing to open or one is already open."""
    failed_undo = _failed_compensation(action)
    if action.status != Action.Status.UNCERTAIN and not failed_undo:
        return None
    try:
        with transaction.atomic():
            case = ReconciliationCase.objects.create(
                tenant_id=action.tenant_id,
                run_id=action.run_id,
                action=action,
                reason=COMPENSATION_FAILED
                if failed_undo
                else action.error_class or "tool_result_uncertain",
                detail=action.last_error,
                status=CaseStatus.OPEN if failed_undo else CaseStatus.PROBING,
                next_probe_at=None if failed_undo else db_now(),
                four_eyes_at_open=policy_four_eyes(tenant=action.tenant, tool=action.tool),
            )
            entry = audit_record(
                actor=RECONCILER,
                verb="case.open",
                tenant=action.tenant,
                object_type="case",
                object_id=str(case.pk),
                reason=case.reason,
                data={"action": str(action.pk), "key": action.idempotency_key},
            )
            receipts.uncertain_stated(action, case_pk=case.pk, reason=case.reason, entry=entry)
    except IntegrityError:
        return None
    return case


def open_missing_cases(*, run_id=None) -> int:
    """Every uncertain action without an unresolved case gets one; returns how many opened."""
    uncertain = Action.objects.filter(status=Action.Status.UNCERTAIN).exclude(
        cases__status__in=UNRESOLVED
    )
    failed_undos = Action.objects.filter(
        status=Action.Status.FAILED,
        action_id__startswith=saga.COMPENSATION_PREFIX,
        cases__isnull=True,
    )
    actions = (uncertain | failed_undos).distinct().select_related("tenant")
    if run_id is not None:
        actions = actions.filter(run_id=run_id)
    return sum(case_open(action=action) is not None for action in actions)


def mark_resolved(
    case, *, resolution: str, note: str, actor: str, user, evidence, **fields
) -> None:
    updated = ReconciliationCase.objects.filter(pk=case.pk, status__in=UNRESOLVED).update(
        status=CaseStatus.RESOLVED,
        resolution=resolution,
        resolution_note=note,
        evidence=evidence,
        resolved_by=user,
        resolved_at=timezone.now(),
        next_probe_at=None,
        **fields,
    )
    if updated != 1:
        raise InvalidTransition("the case was resolved by someone else first")
    entry = audit_record(
        actor=actor,
        verb="case.resolve",
        tenant=case.tenant,
        object_type="case",
        object_id=str(case.pk),
        reason=note,
        data={"resolution": resolution, "evidence": evidence, "action": str(case.action_id)},
    )
    receipts.resolved_stated(
        case.action,
        case_pk=case.pk,
        resolution=resolution,
        note=note,
        decider=receipts.person(user, receipts.SESSION) if user else receipts.probe(actor),
        found=evidence,
        entry=entry,
    )


def case_resolve(
    *,
    case: ReconciliationCase,
    user,
    resolution: str,
    note: str,
    evidence: dict | None = None,
    confirm_resend: bool = False,
) -> ReconciliationCase:
    """A reconciler's resolution. Where four eyes apply (case_needs_four_eyes), a first
    resolution waits for a second reconciler to confirm the same one."""
    action = case.action
    if not has_any_role(user, case.tenant, RECONCILER_ROLES):
        raise NotAllowed("only a reconciler of this tenant may resolve cases")
    if case.status not in (CaseStatus.OPEN, CaseStatus.AWAITING_SECOND):
        raise InvalidTransition(f"the case is {case.status}, not waiting for a person")
    if resolution not in Resolution.values:
        raise ResolutionRefused(f"resolution must be one of {', '.join(Resolution.values)}")
    if not note.strip():
        raise ResolutionRefused("say why: a resolution is audited with its reason")
    if case.reason == COMPENSATION_FAILED and resolution not in (
        Resolution.APPLIED,
        Resolution.ABANDON,
    ):
        raise ResolutionRefused(
            "the compensation failed for good: resolve as applied (undone by hand, with "
            "evidence) or abandon (the step stays done)"
        )
    try:
        tool = tenant_tool(
            tenant=case.tenant, name=action.tool, contract_version=action.contract_version
        )
    except tool_errors.UnsupportedTool as error:
        if resolution in (Resolution.NOT_APPLIED, Resolution.COMPENSATE):
            raise ResolutionRefused(
                f"{error}: nothing can be sent with it; resolve as applied with evidence, "
                "or abandon"
            ) from None
        tool = None
    receipt = None
    if resolution in (Resolution.APPLIED, Resolution.COMPENSATE):
        since = first_attempt_started(action.pk)
        evidence, receipt = evidence_receipt(case, evidence, since=since)
    if resolution == Resolution.COMPENSATE and not tool.compensation:
        raise ResolutionRefused(f"{tool.name} declares no compensation")
    if resolution == Resolution.NOT_APPLIED and not tool.dedupes_by_key and not confirm_resend:
        raise ResolutionRefused(
            f"{tool.name} does not deduplicate: confirm that sending it again is intended"
        )
    if case_needs_four_eyes(case) and not _confirms(
        case, user=user, resolution=resolution, evidence=evidence
    ):
        return _propose_resolution(
            case,
            user=user,
            resolution=resolution,
            note=note,
            evidence=evidence,
            confirm_resend=confirm_resend,
        )
    actor = user.get_username()
    with transaction.atomic():
        _apply(
            case,
            resolution=resolution,
            receipt=receipt,
            note=note,
            actor=actor,
            confirm_resend=confirm_resend,
        )
        mark_resolved(
            case,
            resolution=resolution,
            note=note,
            actor=actor,
            user=user,
            evidence=evidence,
            resend_confirmed=confirm_resend,
        )
    case.refresh_from_db()
    return case


def _confirms(case, *, user, resolution: str, evidence) -> bool:
    if case.status != CaseStatus.AWAITING_SECOND:
        return False
    if case.proposed_by_id == user.pk:
        raise NotAllowed("four eyes: another reconciler must confirm this resolution")
    if case.resolution != resolution or case.evidence != evidence:
        raise ResolutionRefused(
            f"confirm the proposed resolution ({case.resolution}) with the same evidence, "
            "or ask the proposer to withdraw it"
        )
    return True


@transaction.atomic
def _propose_resolution(case, *, user, resolution, note, evidence, confirm_resend):
    updated = ReconciliationCase.objects.filter(pk=case.pk, status=CaseStatus.OPEN).update(
        status=CaseStatus.AWAITING_SECOND,
        resolution=resolution,
        resolution_note=note,
        evidence=evidence,
        resend_confirmed=confirm_resend,
        proposed_by=user,
    )
    if updated != 1:
        raise InvalidTransition("the case changed; reload it")
    audit_record(
        actor=user.get_username(),
        verb="case.propose_resolution",
        tenant=case.tenant,
        object_type="case",
        object_id=str(case.pk),
        reason=note,
        data={"resolution": resolution, "evidence": evidence},
    )
    case.refresh_from_db()
    return case


def _apply(case, *, resolution: str, receipt, note: str, actor: str, confirm_resend: bool) -> None:
    action = case.action
    if case.reason == COMPENSATION_FAILED:
        return  # the failed undo stays failed; the resolution and its evidence are the record
    if resolution in (Resolution.APPLIED, Resolution.COMPENSATE):
        protocol.receipt_record(
            action_pk=action.pk,
            lease=None,
            receipt=receipt,
            source=Receipt.Source.RECONCILER,
            worker=actor,
        )
        if resolution == Resolution.COMPENSATE:
            action.refresh_from_db()
            action.run.refresh_from_db()
            saga.propose_compensation(action.run, original=action, reason=note)
    elif resolution == Resolution.NOT_APPLIED:
        resend = "resend confirmed" if confirm_resend else "same key, deduplicated"
        recovery.action_retry_same_key(
            action_pk=action.pk,
            lease=None,
            worker=actor,
            finding=f"resolved not applied ({resend}): {note}",
        )
    else:
        endings.action_abandon(action_pk=action.pk, reason=note, actor=actor)
