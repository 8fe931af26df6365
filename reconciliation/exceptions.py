"""Domain errors of reconciliation."""

from __future__ import annotations


class ReconciliationError(Exception):
    code = "reconciliation_error"
