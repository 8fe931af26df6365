"""Tenant scoping and role checks: the one place that decides who sees and does what."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from control.foundation.row_signing import SignedRows
from control.models import Membership, Role, Tenant

APPROVER_ROLES = frozenset({Role.OPERATOR, Role.ADMIN})
RECONCILER_ROLES = frozenset({Role.RECONCILER, Role.ADMIN})
# Who reads the evidence: the receipts ledger, the audit page, the read-only admin.
EVIDENCE_READER_ROLES = frozenset({Role.AUDITOR, Role.ADMIN})


# Who holds which role decides who may approve: a membership row is signed when the
# services write it (control.services.member_add), and one that does not verify grants nothing.
MEMBERSHIP_ROWS = SignedRows(
    "membership", "control.Membership", lambda row: {"user": row.user_id, "role": row.role}
)


def verified_memberships(queryset: QuerySet[Membership]) -> tuple[list, list]:
    """The rows of `queryset` that verify, and those that do not (as (row, problem))."""
    verified, refused = [], []
    for row in queryset:
        problem = MEMBERSHIP_ROWS.problem(row)
        if problem:
            refused.append((row, problem))
        else:
            verified.append(row)
    return verified, refused


def roles_of(user, tenant: Tenant) -> frozenset[str]:
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    verified, _ = verified_memberships(Membership.objects.filter(user=user, tenant=tenant))
    return frozenset(row.role for row in verified)


def has_any_role(user, tenant: Tenant, roles: Iterable[str]) -> bool:
    return bool(roles_of(user, tenant) & frozenset(roles))


def roles_of_members(user_ids, tenant_ids) -> dict[tuple, frozenset[str]]:
    """roles_of for many (user, tenant) pairs in one query: {(user id, tenant id): roles};
    a pair without a verified membership, or an inactive user's, is absent (no role)."""
    held: dict[tuple, set[str]] = {}
    verified, _ = verified_memberships(
        Membership.objects.filter(
            user_id__in=user_ids, tenant_id__in=tenant_ids, user__is_active=True
        )
    )
    for row in verified:
        held.setdefault((row.user_id, row.tenant_id), set()).add(row.role)
    return {pair: frozenset(roles) for pair, roles in held.items()}
