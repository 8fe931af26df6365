"""Domain errors of reconciliation; the edge (view, API, job) translates them."""

from __future__ import annotations


class ReconciliationError(Exception):
    code = "reconciliation_error"


class ResolutionRefused(ReconciliationError):
    """The resolution lacks what it needs (evidence, a matching digest, a confirmation)."""

    code = "resolution_refused"


class NotAllowed(ReconciliationError):
    code = "not_allowed"


class InvalidTransition(ReconciliationError):
    code = "invalid_transition"
