"""Tenants, members and API tokens: created, changed and revoked only here, each audited."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from control.exceptions import AlreadyExists, InvalidInput, NotFound
from control.foundation.audit import audit_record
from control.foundation.tenancy import EVIDENCE_READER_ROLES, MEMBERSHIP_ROWS
from control.models import ApiToken, Membership, Role, Tenant

TOKEN_PREFIX = "cs_"


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def tenant_get(name: str) -> Tenant:
    try:
        return Tenant.objects.get(name=name)
    except Tenant.DoesNotExist:
        raise NotFound(f"no tenant named {name!r}") from None


@transaction.atomic
def tenant_create(*, name: str, actor: str) -> Tenant:
    if not name or slugify(name) != name:
        raise InvalidInput(
            f"tenant name must be a lower-case slug (letters, digits, -), not {name!r}"
        )
    if Tenant.objects.filter(name=name).exists():
        raise AlreadyExists(f"tenant {name!r} already exists")
    tenant = Tenant.objects.create(name=name)
    audit_record(
        actor=actor,
        verb="tenant.create",
        tenant=tenant,
        object_type="tenant",
        object_id=str(tenant.pk),
    )
    return tenant


@transaction.atomic
def member_add(
    *,
    tenant: Tenant,
    username: str,
    role: str,
    actor: str,
    password: str | None = None,
    admin_site: bool = False,
) -> Membership:
    """Gives `username` a role in `tenant`, creating the user when missing. `admin_site` lets
    them into the read-only admin (staff): an auditor or admin sees their tenants there."""
    if role not in Role.values:
        raise InvalidInput(f"role must be one of {', '.join(Role.values)}; got {role!r}")
    if admin_site and role not in EVIDENCE_READER_ROLES:
        raise InvalidInput(f"the admin site is for auditors and admins, not for the {role} role")
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username)
    if password is not None:
        try:
            validate_password(password, user)
        except ValidationError as error:
            raise InvalidInput("; ".join(error.messages)) from None
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if admin_site and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    membership, _ = Membership.objects.get_or_create(tenant=tenant, user=user, role=role)
    # Signed even when it existed: re-adding a member is how an admin vouches again for a
    # row that no longer verifies (verify_audit names it).
    MEMBERSHIP_ROWS.seal(membership)
    audit_record(
        actor=actor,
        verb="member.add",
        tenant=tenant,
        object_type="user",
        object_id=str(user.pk),
        data={"username": username, "role": role, "admin_site": user.is_staff},
    )
    return membership


@transaction.atomic
def api_token_create(*, tenant: Tenant, name: str, actor: str) -> tuple[ApiToken, str]:
    """Returns the token row and the token itself, which is never stored or shown again."""
    if not name.strip():
        raise InvalidInput("token name must not be empty")
    if ApiToken.objects.filter(tenant=tenant, name=name).exists():
        raise AlreadyExists(f"tenant {tenant.name!r} already has a token named {name!r}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        tenant=tenant, name=name, prefix=token[:10], token_hash=token_hash(token)
    )
    audit_record(
        actor=actor,
        verb="api_token.create",
        tenant=tenant,
        object_type="api_token",
        object_id=str(row.pk),
        data={"name": name, "prefix": row.prefix},
    )
    return row, token


@transaction.atomic
def api_token_revoke(*, tenant: Tenant, name: str, actor: str) -> ApiToken:
    row = ApiToken.objects.filter(tenant=tenant, name=name, revoked_at__isnull=True).first()
    if row is None:
        raise NotFound(f"no active token named {name!r} in tenant {tenant.name!r}")
    row.revoked_at = timezone.now()
    row.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        verb="api_token.revoke",
        tenant=tenant,
        object_type="api_token",
        object_id=str(row.pk),
        data={"name": name},
    )
    return row


def api_token_authenticate(token: str) -> ApiToken | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    row = (
        ApiToken.objects.select_related("tenant")
        .filter(token_hash=token_hash(token), revoked_at__isnull=True)
        .first()
    )
    if row is not None:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    return row
