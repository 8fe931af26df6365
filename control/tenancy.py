"""Tenant scoping and role checks: the one place that decides who sees and does what."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Model, QuerySet

from control.models import Membership, Role, Tenant

APPROVER_ROLES = frozenset({Role.OPERATOR, Role.ADMIN})
RECONCILER_ROLES = frozenset({Role.RECONCILER, Role.ADMIN})


def scoped[M: Model](queryset: QuerySet[M], tenant: Tenant) -> QuerySet[M]:
    """Every query a person or token makes goes through here."""
    return queryset.filter(tenant=tenant)


def roles_of(user, tenant: Tenant) -> frozenset[str]:
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    return frozenset(
        Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True)
    )


def has_any_role(user, tenant: Tenant, roles: Iterable[str]) -> bool:
    return bool(roles_of(user, tenant) & frozenset(roles))


def roles_of_members(user_ids, tenant_ids) -> dict[tuple, frozenset[str]]:
    """roles_of for many (user, tenant) pairs in one query: {(user id, tenant id): roles};
    a pair without a membership, or an inactive user's, is absent (no role)."""
    held: dict[tuple, set[str]] = {}
    memberships = Membership.objects.filter(
        user_id__in=user_ids, tenant_id__in=tenant_ids, user__is_active=True
    ).values_list("user_id", "tenant_id", "role")
    for user_id, tenant_id, role in memberships:
        held.setdefault((user_id, tenant_id), set()).add(role)
    return {pair: frozenset(roles) for pair, roles in held.items()}
