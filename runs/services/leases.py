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
