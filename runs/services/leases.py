"""The run's lease: claim, renew, release; database time, a fencing version that only grows."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from runs.exceptions import (
    LeaseBusy,
    LeaseLost,
)
from runs.models import (
    Lease,
)
from runs.record.direct_sql import leases_expire, leases_lock, leases_remaining, leases_take
from runs.record.events import LeaseToken


@transaction.atomic
def lease_claim(*, run_id, owner: str, seconds: int | None = None) -> LeaseToken:
    """Takes the run's lease if it is free, expired, or already ours; the version grows."""
    seconds = seconds or settings.COUNTERSIGN_LEASE_SECONDS
    claimable = Q(expires_at__isnull=True) | Q(expires_at__lte=Now()) | Q(owner=owner)
    updated = Lease.objects.filter(claimable, run_id=run_id).update(
        owner=owner,
        lease_version=F("lease_version") + 1,
        expires_at=Now() + timedelta(seconds=seconds),
    )
    if updated != 1:
        raise LeaseBusy(f"run {run_id} is leased by another worker")
    version = Lease.objects.values_list("lease_version", flat=True).get(run_id=run_id)
    return LeaseToken(run_id=str(run_id), owner=owner, version=version)


def lease_renew(*, lease: LeaseToken, seconds: int | None = None) -> None:
    seconds = seconds or settings.COUNTERSIGN_LEASE_SECONDS
    updated = Lease.objects.filter(
        run_id=lease.run_id, owner=lease.owner, lease_version=lease.version, expires_at__gt=Now()
    ).update(expires_at=Now() + timedelta(seconds=seconds))
    if updated != 1:
        raise LeaseLost(f"lease v{lease.version} on run {lease.run_id} is no longer held")


def lease_release(*, lease: LeaseToken) -> None:
    Lease.objects.filter(
        run_id=lease.run_id, owner=lease.owner, lease_version=lease.version
    ).update(expires_at=Now())


# The set-based forms for a worker's batch (runs.execution.batch): one statement or two for
# every lease of the batch, with exactly the single forms' conditions.


def leases_claim(*, run_ids: list, owner: str, seconds: int | None = None) -> dict:
    """lease_claim for many runs in one UPDATE: {run id: LeaseToken} of those it took (a run
    leased by another worker is left out). Inside the caller's transaction."""
    seconds = seconds or settings.COUNTERSIGN_LEASE_SECONDS
    return {
        str(run_id): LeaseToken(run_id=str(run_id), owner=owner, version=version)
        for run_id, version in leases_take(run_ids, owner=owner, seconds=seconds)
    }


def leases_held(leases: list[LeaseToken], *, renew: bool = False) -> set[str]:
    """The run ids of `leases` still held (owner, version and term), their rows locked until
    the caller's transaction ends (check_lease for many); with `renew`, held ones get a full
    term again."""
    versions = {lease.run_id: (lease.owner, lease.version) for lease in leases}
    rows = leases_lock(list(versions))
    held = {str(run_id) for run_id, *token in rows if versions[str(run_id)] == tuple(token)}
    if renew and held:
        leases_expire(list(held), seconds=settings.COUNTERSIGN_LEASE_SECONDS)
    return held


def leases_left(leases: list[LeaseToken]) -> dict[str, float]:
    """Of `leases`, those still held, with the seconds each has left by the database's
    clock: {run id: seconds}. One read, no lock: a fence before calls, not a guard."""
    versions = {lease.run_id: (lease.owner, lease.version) for lease in leases}
    return {
        str(run_id): seconds
        for run_id, owner, version, seconds in leases_remaining(list(versions))
        if versions[str(run_id)] == (owner, version)
    }


def leases_release(leases: list[LeaseToken]) -> None:
    """lease_release for leases the caller's transaction holds locked (leases_held)."""
    if leases:
        leases_expire([lease.run_id for lease in leases])
