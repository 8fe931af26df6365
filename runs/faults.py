"""Crash points for the crash tests: the worker SIGKILLs itself at a named point.

Honoured only when settings.COUNTERSIGN_ALLOW_FAULT_POINTS is on (test settings), so a
stray environment variable in production can never kill a worker.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

FAULT_POINTS = ("before_send", "after_send_before_receipt", "after_receipt")


def crash_point(name: str) -> None:
    if name not in FAULT_POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    if settings.COUNTERSIGN_ALLOW_FAULT_POINTS and name == settings.COUNTERSIGN_FAULT_POINT:
        os.kill(os.getpid(), signal.SIGKILL)
