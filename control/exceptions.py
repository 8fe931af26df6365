"""Domain errors of the foundation (tenancy, members, tokens)."""

from __future__ import annotations


class ControlError(Exception):
    code = "control_error"


class AlreadyExists(ControlError):
    code = "already_exists"


class NotFound(ControlError):
    code = "not_found"


class InvalidInput(ControlError):
    code = "invalid_input"
