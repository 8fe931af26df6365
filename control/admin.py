"""The Django admin: a read-only window on the evidence, scoped like everything else.

Nobody adds, changes or deletes through the admin, superusers included: evidence is
insert-only, and every change goes through a service that writes its audit row. That holds
for Django's users and groups too: people and their roles are managed with commands
(`addmember`) and audited services, and passwords on the site's throttled, audited page
(control/auth/passwords.py). A superuser (the installation's operator) sees every tenant; any
other staff user sees only the tenants where they hold the auditor or admin role, and
nothing at all without one. Users and groups belong to no tenant: superusers only.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from control.auth.login import AdminLoginForm
from control.foundation.tenancy import EVIDENCE_READER_ROLES, verified_memberships
from control.models import ApiToken, AuditEntry, Membership, Tenant

# The admin's login is throttled and says so, like the site's.
admin.site.login_form = AdminLoginForm


def _password_change_on_the_site(request: HttpRequest) -> HttpResponse:
    return redirect("password_change")


# The admin's own page sets a new password without asking for the current one, unthrottled
# and unaudited: its "Change password" link leads to the site's page instead.
admin.site.password_change = _password_change_on_the_site


def admin_tenant_ids(request: HttpRequest) -> frozenset:
    """Tenants whose evidence this staff user may read in the admin (cached per request)."""
    cached = getattr(request, "_countersign_admin_tenants", None)
    if cached is None:
        user = request.user
        rows = Membership.objects.filter(user=user, role__in=EVIDENCE_READER_ROLES)
        cached = frozenset(
            row.tenant_id
            for row in (verified_memberships(rows)[0] if user.is_active and user.is_staff else ())
        )
        request._countersign_admin_tenants = cached
    return cached


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only for everyone; rows limited to the viewer's tenants unless a superuser.

    `tenant_path` is the lookup from the model to its Tenant; None for rows of no tenant,
    which only superusers see."""

    tenant_path: str | None = "tenant"
    # No actions at all: delete_selected is the only built-in one, and nothing here changes.
    actions = None
    list_per_page = 50
    # No COUNT(*) of the whole table on every changelist page.
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            return False
        if user.is_superuser:
            return True
        # An object outside the viewer's tenants never gets here: get_queryset hides it (404).
        return self.tenant_path is not None and bool(admin_tenant_ids(request))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        if self.tenant_path is None:
            return rows.none()
        return rows.filter(**{f"{self.tenant_path}__in": admin_tenant_ids(request)})


# Filters list only the tenants present in the rows the viewer may see.
TENANT_FILTER = ("tenant", admin.RelatedOnlyFieldListFilter)


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    tenant_path = "id"
    list_display = ("name", "id", "created_at")
    search_fields = ("name", "id__exact")
    ordering = ("name",)


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "role", "tenant", "created_at")
    list_select_related = ("user", "tenant")
    list_filter = ("role", TENANT_FILTER)
    search_fields = ("user__username", "tenant__name")
    ordering = ("tenant__name", "user__username", "role")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    # Only the prefix identifies a token; the hash stays out of every admin page.
    fields = ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    list_display = ("name", "prefix", "tenant", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("tenant",)
    list_filter = (TENANT_FILTER,)
    search_fields = ("name", "prefix", "tenant__name")
    ordering = ("tenant__name", "name")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("seq", "created_at", "actor", "verb", "object_type", "object_id", "tenant")
    list_select_related = ("tenant",)
    list_filter = ("verb", TENANT_FILTER)
    search_fields = ("actor", "verb", "object_id", "reason")
    ordering = ("-seq",)


# Django registered its own User and Group admins, which add, edit and delete.
admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class UserAdmin(ReadOnlyAdmin):
    tenant_path = None
    # Never the password hash.
    fields = (
        "username",
        "first_name",
        "last_name",
        "email",
        "is_active",
        "is_staff",
        "is_superuser",
        "groups",
        "user_permissions",
        "last_login",
        "date_joined",
    )
    list_display = ("username", "email", "is_active", "is_staff", "is_superuser", "last_login")
    list_filter = ("is_active", "is_staff", "is_superuser")
    search_fields = ("username", "email")
    ordering = ("username",)


@admin.register(Group)
class GroupAdmin(ReadOnlyAdmin):
    tenant_path = None
    fields = ("name", "permissions")
    search_fields = ("name",)
    ordering = ("name",)
