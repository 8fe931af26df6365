"""Seeding a tenant at volume: pending approvals and a million events, in a few minutes.

The tenant gets `approvals` runs each waiting for a decision on one `ticket.close` intent
(3 events each: started, observed, proposed), and `history_runs` running runs that have
observed many times, carrying the rest of the events (each observation is an event and an
Observation row). Runs are spread over the last 30 days and the requests' expiries over
the next day, so keyset pages have real orderings to walk.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, connections
from django.utils import timezone

from bench.builder import RunSpec, build_and_insert
from control.models import Tenant
from control.services import tenant_create

EVENTS_PER_WAITING_RUN = 3


@dataclass
class VolumeReport:
    tenant: Tenant
    runs: int
    events: int
    pending_approvals: int


def plan_history(*, approvals: int, events: int, history_runs: int) -> int:
    """Observations per history run so that the tenant holds at least `events` events."""
    remaining = events - approvals * EVENTS_PER_WAITING_RUN
    if remaining <= 0 or history_runs == 0:
        return 0
    return max(0, math.ceil(remaining / history_runs) - 1)


def _specs(tenant: Tenant, *, approvals: int, history_runs: int, observations: int, part=(0, 1)):
    """The runs to seed; `part` (index, of) keeps every of-th run starting at index."""
    now = timezone.now()
    span = timedelta(days=30)
    total = approvals + history_runs
    index, of = part

    def created(number: int):
        return now - span + span * (number / max(total, 1))

    def waiting() -> Iterator[RunSpec]:
        for number in range(index, approvals, of):
            yield RunSpec(
                tenant=tenant,
                tool="ticket.close",
                target=f"ticket-{number % 100 + 1}",
                args={"resolution": "fixed"},
                action_id=f"close-{number}",
                goal=f"close the ticket of customer {number} once they confirm",
                created_at=created(number),
                approval_seconds=3600 + (number * 7919) % 86_400,
            )

    def history() -> Iterator[RunSpec]:
        for number in range(index, history_runs, of):
            yield RunSpec(
                tenant=tenant,
                tool=None,
                goal=f"watch account {number} and act when it changes",
                observations=observations,
                created_at=created(approvals + number),
            )

    yield from waiting()
    yield from history()


def _seed_part(tenant_pk, part, approvals, history_runs, observations) -> tuple[int, int]:
    tenant = Tenant.objects.get(pk=tenant_pk)
    specs = _specs(
        tenant,
        approvals=approvals,
        history_runs=history_runs,
        observations=observations,
        part=part,
    )
    runs, written, _ = build_and_insert(specs, now=timezone.now())
    return runs, written


def seed_volume(
    *, tenant_name: str, approvals: int, events: int, history_runs: int, jobs: int = 2
) -> VolumeReport:
    """Seeds in `jobs` forked processes (each its own connection), one share of runs each."""
    tenant = Tenant.objects.filter(name=tenant_name).first() or tenant_create(
        name=tenant_name, actor="seed_volume"
    )
    observations = plan_history(approvals=approvals, events=events, history_runs=history_runs)
    history_runs = history_runs if observations else 0
    arguments = [
        (tenant.pk, (index, jobs), approvals, history_runs, observations) for index in range(jobs)
    ]
    if jobs == 1:
        results = [_seed_part(*arguments[0])]
    else:
        connections.close_all()  # children must not share this process's connections
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.starmap(_seed_part, arguments)
    runs = sum(r for r, _ in results)
    written = sum(w for _, w in results)
    # Fresh statistics, so the planner knows the tables' new sizes at once, and the visibility
    # map autovacuum would set after a bulk load (the inbox counts its waiting requests with an
    # index-only scan; without the map it reads the table). A test's transaction cannot vacuum.
    verb = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
    with connection.cursor() as cursor:
        for table in ("runs_run", "runs_action", "runs_runevent", "runs_observation"):
            cursor.execute(f"{verb} {table}")
    return VolumeReport(tenant=tenant, runs=runs, events=written, pending_approvals=approvals)
