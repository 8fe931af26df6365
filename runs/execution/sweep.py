"""The sweep: re-drives every piece of work from PostgreSQL, so losing Redis loses nothing.

One pass relays undelivered outbox messages, expires unanswered approval requests (a plan's as
a whole), escalates those waiting past their tool policy's SLA, stops runs past their
deadline, ends MCP sessions' runs left idle, and makes sure a drain job waits in the queue
when actions are due (ready, waiting for a retry, or orphaned in flight by a dead worker).
Each step runs on its own: one that raises is logged once and backs off while the others go
on (runs.execution.sweep_steps). Two sweepers at once are safe: every step is a
compare-and-set, an enqueue under a deterministic job id, or a drain job (two of them at once
only share the work).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from redis.exceptions import RedisError

from runs.exceptions import RunsError
from runs.execution.sweep_steps import STEPS
from runs.models import TERMINAL_PHASES, Action, OutboxMessage, Plan, Run, notify_kinds
from runs.notify.delivery import requeue_lost
from runs.record.outbox import drain_ensure_queued, relay
from runs.selectors import any_action_due, escalations_due, idle_mcp_runs
from runs.services import (
    approval_escalate,
    approval_expire,
    approval_warn_expiring,
    plan_expire,
    run_end_idle,
    run_enforce_limits,
)

logger = logging.getLogger(__name__)
# People hear about a plan once, through its first item, not once per intent.
ONE_PER_REQUEST = Q(plan__isnull=True) | Q(position=0)


@dataclass
class SweepReport:
    relayed: int = 0
    expired: int = 0
    warned: int = 0
    escalated: int = 0
    stopped: int = 0
    idled: int = 0
    drains_enqueued: int = 0
    errors: list[str] = field(default_factory=list)


def sweep_once() -> SweepReport:
    """One pass; each step runs on its own (runs.execution.sweep_steps), so one that fails
    leaves the others running."""
    report = SweepReport()

    def step(name: str, work) -> int:
        return STEPS.run(name, work, errors=report.errors) or 0

    report.expired = step("expire", lambda: _expire_requests(report))
    report.expired += step("expire plans", lambda: _expire_plans(report))
    report.warned = step("warn", lambda: _warn_expiring(report))
    report.escalated = step("escalate", lambda: _escalate(report))
    report.stopped = step("deadline", lambda: _stop_late_runs(report))
    report.idled = step("idle", lambda: _end_idle_mcp_runs(report))
    step("requeue notifications", requeue_lost)
    report.relayed = step("relay", lambda: relay(OutboxMessage.objects.all()))
    report.drains_enqueued = step("drain", lambda: _enqueue_drains() if any_action_due() else 0)
    return report


def _expire_requests(report: SweepReport) -> int:
    expiring = Action.objects.filter(
        status=Action.Status.WAITING_APPROVAL, expires_at__lte=Now(), plan__isnull=True
    )
    return _each(
        report, "expire", expiring.select_related("run"), lambda a: approval_expire(action=a)
    )


def _expire_plans(report: SweepReport) -> int:
    lapsed = Plan.objects.filter(status=Plan.Status.WAITING_APPROVAL, expires_at__lte=Now())
    return _each(report, "expire plan", lapsed, lambda p: plan_expire(plan=p))


def _warn_expiring(report: SweepReport) -> int:
    warning = timedelta(seconds=settings.COUNTERSIGN_APPROVAL_WARNING_SECONDS)
    soon = Action.objects.filter(
        ONE_PER_REQUEST, status=Action.Status.WAITING_APPROVAL, expires_at__lte=Now() + warning
    ).exclude(outboxmessage__payload__kind=notify_kinds.EXPIRING)
    return _each(
        report, "warn", soon.select_related("run"), lambda a: approval_warn_expiring(action=a)
    )


def _escalate(report: SweepReport) -> int:
    due = escalations_due().filter(ONE_PER_REQUEST)
    return _each(report, "escalate", due, lambda a: approval_escalate(action=a))


def _stop_late_runs(report: SweepReport) -> int:
    late = Run.objects.filter(deadline__lte=Now()).exclude(phase__in=TERMINAL_PHASES)
    return _each(report, "deadline", late, lambda run: run_enforce_limits(run=run))


def _end_idle_mcp_runs(report: SweepReport) -> int:
    """Ends the MCP sessions' runs nobody called for COUNTERSIGN_MCP_IDLE_SECONDS (the
    application's clock, as their events' times), each in the phase its record supports."""
    seconds = settings.COUNTERSIGN_MCP_IDLE_SECONDS
    idle_since = timezone.now() - timedelta(seconds=seconds)
    return _each(
        report,
        "idle",
        idle_mcp_runs(idle_since=idle_since),
        lambda run: run_end_idle(run=run, idle_since=idle_since, idle_seconds=seconds),
    )


def _each(report: SweepReport, step: str, rows, change) -> int:
    """Applies `change` to every row; one row that fails is reported and logged, and the
    others (and the sweep's loop) go on. Returns how many rows it changed."""
    changed = 0
    for row in rows:
        try:
            changed += bool(change(row))
        except RunsError as error:
            report.errors.append(f"{step} {row.pk}: {error}")
        except Exception as error:
            logger.exception("sweep: %s of %s failed", step, row.pk)
            report.errors.append(f"{step} {row.pk}: {type(error).__name__}: {error}")
    return changed


def _enqueue_drains() -> int:
    """Makes sure a drain job waits in the queue (the one an approval's relay would have
    queued, if Redis lost it): 1 when it queued one, 0 when one was already waiting. A job
    that is running does not count: it may be past its last claim. Drains that find a
    backlog queue helpers themselves, so one waiting job is enough."""
    try:
        return int(drain_ensure_queued())
    except RedisError as error:
        logger.warning("sweep could not enqueue a drain: %s", error)
        return 0
