"""Domain errors of runs; the edge (view, API, job, command) translates them."""

from __future__ import annotations


class RunsError(Exception):
    """Base of every refusal a runs service can raise. `code` is stable for clients."""

    code = "runs_error"


class NotFound(RunsError):
    code = "not_found"


class InvalidTransition(RunsError):
    code = "invalid_transition"


class PlanItemAlone(InvalidTransition):
    """An intent proposed in a plan was asked to be decided (approved, rejected, edited, asked
    again, granted by a rule) on its own: a plan is decided only as a whole. `plan_pk` names
    the plan to decide instead."""

    code = "plan_item"

    def __init__(self, message: str, *, plan_pk) -> None:
        super().__init__(message)
        self.plan_pk = plan_pk


class StaleState(RunsError):
    """Another writer changed the run first (optimistic lock on state_version)."""

    code = "stale_state"


class LeaseLost(RunsError):
    """The caller's lease version is no longer the current one, or it expired."""

    code = "lease_lost"


class LeaseBusy(RunsError):
    """Another owner holds an unexpired lease on the run."""

    code = "lease_busy"


class IntentConflict(RunsError):
    """The same logical action was proposed again with a different digest."""

    code = "intent_conflict"


class DefinitionChanged(RunsError):
    """A tool's definition differs from the one frozen at its contract version."""

    code = "definition_changed"


class InvalidArguments(RunsError):
    code = "invalid_arguments"


class TooManyWaiting(RunsError):
    """An agent already has its cap of requests (or plans) waiting for people
    (runs.limits.waiting_cap_check); `retry_after` is in seconds."""

    code = "too_many_waiting"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ReceiptRefused(RunsError, ValueError):
    """A receipt that does not prove the action it was offered for (another intent's digest,
    another key): never recorded as its success."""

    code = "receipt_refused"


class GrantMismatch(RunsError):
    """The approval does not authorise this exact intent now. `rule` names the broken binding."""

    code = "grant_mismatch"

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class NotAllowed(RunsError):
    """The person lacks the role, or the policy forbids them (e.g. four eyes)."""

    code = "not_allowed"


class MissingEvidence(RunsError):
    code = "missing_evidence"


class CheckpointError(RunsError):
    """A checkpoint failed verification. `step` is where: parse, envelope, schema_version,
    mac, invariants, freshness or lease."""

    code = "checkpoint_invalid"

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


class UnsignedRows(CheckpointError):
    """A new checkpoint would sign an intent or grant that the last verified one did not
    sign and no service wrote in this transaction (runs.record.carry): refused, never
    laundered into a signed state."""

    code = "unsigned_rows"

    def __init__(self, problems: list[str]) -> None:
        detail = "; ".join(problems)
        super().__init__("binding", f"the rows differ from the signed checkpoint: {detail}")
        self.problems = problems


class LinkUsed(RunsError):
    """A decision link from an email was already used: each decides once."""

    code = "link_used"
