"""Enabling and disabling connectors for a tenant (`manage.py connectors enable|disable`).

A new tenant reaches no external system: each connector it may use is enabled here, with or
without reads that run at once. Each call that changes something writes one audit entry
(`connectors.enable`, `connectors.disable`) in its transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from control.foundation.audit import audit_record
from control.models import Tenant
from runs.exceptions import InvalidArguments
from runs.models import ConnectorEnablement
from runs.record.signed_rows import ENABLEMENT_ROWS
from runs.selectors.connectors import known_connectors


def _named(connectors: Sequence[str] | None, *, choices: set[str], absent: str) -> list[str]:
    """The connectors a call names (None: every one of `choices`), each checked."""
    if connectors is None:
        return sorted(choices)
    names = sorted({name.strip() for name in connectors})
    if not names:
        raise InvalidArguments("name at least one connector, or all of them")
    unknown = [name for name in names if name not in choices]
    if unknown:
        shown = ", ".join(sorted(choices)) or "none"
        raise InvalidArguments(f"unknown connector {unknown[0]!r}: {absent} (known: {shown})")
    return names


def _audit(
    verb: str, *, tenant: Tenant, actor: str, connectors: list[str], reads: bool | None = None
) -> None:
    data: dict = {"connectors": connectors}
    if reads is not None:
        data["reads_without_approval"] = reads
    audit_record(
        actor=actor,
        verb=verb,
        tenant=tenant,
        object_type="tenant",
        object_id=tenant.name,
        data=data,
    )


@transaction.atomic
def connectors_enable(
    *,
    tenant: Tenant,
    connectors: Sequence[str] | None,
    actor: str,
    reads_without_approval: bool = False,
    dry_run: bool = False,
) -> list[str]:
    """Enables each named connector for tenant (None: every connector this server knows
    now; one added later needs enabling too), with reads_without_approval as given: an
    enabled connector named again takes the new setting. Returns those that changed; an
    unknown name is InvalidArguments and changes nothing."""
    names = _named(connectors, choices=known_connectors(), absent="this server has no tool of it")
    rows = ConnectorEnablement.objects.select_for_update().filter(tenant=tenant)
    current = dict(
        rows.filter(connector__in=names).values_list("connector", "reads_without_approval")
    )
    changed = [name for name in names if current.get(name) != reads_without_approval]
    if dry_run or not changed:
        return changed
    for name in changed:
        row, _ = ConnectorEnablement.objects.update_or_create(
            tenant=tenant,
            connector=name,
            defaults={"reads_without_approval": reads_without_approval, "enabled_by": actor},
        )
        ENABLEMENT_ROWS.seal(row)
    _audit(
        "connectors.enable",
        tenant=tenant,
        actor=actor,
        connectors=changed,
        reads=reads_without_approval,
    )
    return changed


@transaction.atomic
def connectors_disable(
    *, tenant: Tenant, connectors: Sequence[str] | None, actor: str, dry_run: bool = False
) -> list[str]:
    """Disables each named connector for tenant (None: every enabled one). From the commit
    on, its tools leave the tenant's catalog, proposals and reads are refused, and a worker
    fails an approved intent of it closed, never sending it. Returns those that were
    enabled; a name neither enabled nor known is InvalidArguments and changes nothing."""
    rows = ConnectorEnablement.objects.select_for_update().filter(tenant=tenant)
    enabled = set(rows.values_list("connector", flat=True))
    names = _named(
        connectors,
        choices=enabled if connectors is None else enabled | known_connectors(),
        absent="this server has no tool of it and it is not enabled",
    )
    changed = [name for name in names if name in enabled]
    if dry_run or not changed:
        return changed
    rows.filter(connector__in=changed).delete()
    _audit("connectors.disable", tenant=tenant, actor=actor, connectors=changed)
    return changed
