"""Asking tools by key before a POST's transaction (used by the cancel, runs.api.runs).

Every API POST runs in one transaction (control.api_kit.idempotency), and a query by key is
external I/O, which never runs inside one. So a cancel asks first, outside it: each write of
the token's run that waits to go again after an attempt is asked for by its key
(runs.services.endings.ask_before_ending), and what the tool holds is recorded before the
cancel's report is written. The operation itself then refuses what it refuses (401, 404, 409)
as before: this step changes nothing but what a query proved.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from control.api_kit.limits import ApiLimited, limit_problem
from control.api_kit.tokens import actor_of, rate_checked_token
from runs.models import TERMINAL_PHASES
from runs.selectors import run_by_id
from runs.services import endings


def writes_asked_by_key_first(
    operation: Callable[..., HttpResponse],
) -> Callable[..., HttpResponse]:
    """Wraps a ninja operation's `run` on a path with `run_id`, outermost (outside the POST's
    transaction); only the token's own run is asked about."""

    @functools.wraps(operation)
    def wrapper(request: HttpRequest, **path_params) -> HttpResponse:
        try:
            token = rate_checked_token(request)
        except ApiLimited as limited:
            return limit_problem(request, limited)
        if token is not None:
            run = run_by_id(path_params.get("run_id", ""), tenant=token.tenant)
            if run is not None and run.phase not in TERMINAL_PHASES:
                endings.run_writes_ask_by_key(run=run, actor=actor_of(token))
        return operation(request, **path_params)

    return wrapper
