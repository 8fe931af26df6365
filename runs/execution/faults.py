"""Fault points for the crash tests: the worker SIGKILLs (or SIGSTOPs) itself at a named point.

COUNTERSIGN_FAULT_POINT=<point> kills the worker there; `pause:<point>` stops it there until
a SIGCONT, to play a stale worker. `<point>@<action pk>` fires only for that action, so a
crash test's kill lands on its own action and not on an earlier run's orphan the same worker
recovers first. Honoured only when settings.COUNTERSIGN_ALLOW_FAULT_POINTS
is on (test settings), so a stray environment variable in production never fires one.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

FAULT_POINTS = ("before_send", "attempt_recorded", "after_send_before_receipt", "after_receipt")


def fault_point(name: str, *, action_pk=None) -> None:
    if name not in FAULT_POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    if not settings.COUNTERSIGN_ALLOW_FAULT_POINTS:
        return
    configured, _, only_for = settings.COUNTERSIGN_FAULT_POINT.partition("@")
    if only_for and only_for != str(action_pk):
        return
    if configured == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif configured == f"pause:{name}":
        os.kill(os.getpid(), signal.SIGSTOP)
