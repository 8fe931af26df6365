"""Kept for imports written before the process helpers moved to tests/processes.py."""

from __future__ import annotations

from tests.processes import Workers, wait_until

__all__ = ["Workers", "wait_until"]
