"""Reads of runs and their parts; each owns its joins so callers never trigger N+1."""

from __future__ import annotations

import uuid

from runs.models import Run


def run_by_id(run_id: str, *, tenant=None) -> Run | None:
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        return None
    queryset = Run.objects.select_related("tenant")
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    return queryset.filter(pk=pk).first()
