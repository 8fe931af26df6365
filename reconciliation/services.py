"""Uncertain outcomes: automatic probes first, then a person's resolution with evidence.

A case opens in `probing`: Countersign queries the tool by the intent's key and reads the
target, with backoff, keeping every result as evidence. A matching receipt settles it as
applied; a definitive "no such key" on a tool that dedupes by key settles it as not applied
and the same key goes again. Only what cannot be proven reaches the human queue (`open`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from control.audit import audit_record
from control.canonical import canonical_json, content_hash
from control.clock import db_now
from control.tenancy import RECONCILER_ROLES, has_any_role
from reconciliation.exceptions import InvalidTransition, NotAllowed, ResolutionRefused
from reconciliation.models import ReconciliationCase
from runs.execution import protocol, recovery, saga
from runs.models import Action, Receipt
from runs.selectors import policy_for
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolReceipt
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY

logger = logging.getLogger(__name__)
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
            )
            audit_record(
                actor=RECONCILER,
                verb="case.open",
                tenant=action.tenant,
                object_type="case",
                object_id=str(case.pk),
                reason=case.reason,
                data={"action": str(action.pk), "key": action.idempotency_key},
            )
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


def _claim_probe(case_pk) -> ReconciliationCase | None:
    """Compare-and-set claim so two sweepers never probe the same case at once."""
    now = db_now()
    claimed = ReconciliationCase.objects.filter(
        pk=case_pk, status=CaseStatus.PROBING, next_probe_at__lte=now
    ).update(next_probe_at=now + timedelta(minutes=5))
    if claimed != 1:
        return None
    return ReconciliationCase.objects.select_related("action", "action__run").get(pk=case_pk)


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
        tool = get_tool(action.tool, action.contract_version)
    except tool_errors.UnsupportedTool as error:
        finding["query"] = finding["read"] = f"{error.error_class}: {error}"
        return finding, None, False
    receipt, definitive_absence = None, False
    if tool.queryable_by_key:
        try:
            receipt = tool.query(action.idempotency_key, timeout=DEFAULT_POLICY.call_timeout)
            finding["query"] = receipt.to_dict() if receipt else "no receipt under this key"
            definitive_absence = receipt is None
        except tool_errors.ToolError as error:
            finding["query"] = f"{error.error_class}: {error}"
    else:
        finding["query"] = "this tool cannot be queried by key"
    try:
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
    _mark_resolved(
        case,
        resolution=resolution,
        note=note,
        actor=RECONCILER,
        user=None,
        evidence=receipt.to_dict() if receipt else None,
        findings=[*case.findings, finding],
        probes=case.probes + 1,
    )


def _mark_resolved(
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
    audit_record(
        actor=actor,
        verb="case.resolve",
        tenant=case.tenant,
        object_type="case",
        object_id=str(case.pk),
        reason=note,
        data={"resolution": resolution, "evidence": evidence, "action": str(case.action_id)},
    )


def _evidence_receipt(case: ReconciliationCase, evidence: dict | None) -> ToolReceipt:
    """The proof a person gives that the effect happened: the external receipt (whose digest
    must be the intent's) or the target state they observed."""
    action = case.action
    if not isinstance(evidence, dict):
        raise ResolutionRefused("evidence is required: a receipt id or the observed state")
    if evidence.get("receipt_id"):
        digest = evidence.get("intent_digest")
        if digest != action.intent_digest:
            raise ResolutionRefused(
                f"the receipt carries digest {digest!r}, the intent is {action.intent_digest}: "
                "it proves another write"
            )
        return ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=digest,
            receipt_id=str(evidence["receipt_id"])[:200],
            target_version=evidence.get("target_version")
            if isinstance(evidence.get("target_version"), int)
            else None,
            status=str(evidence.get("status") or "applied")[:64],
            raw_response_hash=content_hash(canonical_json(evidence)),
        )
    observed = evidence.get("observed_state")
    if isinstance(observed, str) and observed.strip():
        return ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=f"observed:{case.pk}",
            target_version=None,
            status="observed",
            raw_response_hash=content_hash(canonical_json(evidence)),
        )
    raise ResolutionRefused(
        "evidence needs a receipt_id with its intent_digest, or the observed_state of the target"
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
    """A reconciler's resolution. Where the tool's policy asks for four eyes, a first
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
        tool = get_tool(action.tool, action.contract_version)
    except tool_errors.UnsupportedTool as error:
        if resolution in (Resolution.NOT_APPLIED, Resolution.COMPENSATE):
            raise ResolutionRefused(
                f"{error}: nothing can be sent with it; resolve as applied with evidence, "
                "or abandon"
            ) from None
        tool = None
    receipt = None
    if resolution in (Resolution.APPLIED, Resolution.COMPENSATE):
        receipt = _evidence_receipt(case, evidence)
    if resolution == Resolution.COMPENSATE and not tool.compensation:
        raise ResolutionRefused(f"{tool.name} declares no compensation")
    if resolution == Resolution.NOT_APPLIED and not tool.dedupes_by_key and not confirm_resend:
        raise ResolutionRefused(
            f"{tool.name} does not deduplicate: confirm that sending it again is intended"
        )
    if policy_for(tenant=case.tenant, tool=action.tool).four_eyes and not _confirms(
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
        _mark_resolved(
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
        recovery.action_abandon(action_pk=action.pk, reason=note, actor=actor)


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
