"""Who is asking, in which tenant, with which roles: the pages' side of tenancy.

Every page view is wrapped in `tenant_member(*roles)`. It resolves the request's tenant from
the session (the tenant switcher sets it; a person in one tenant never sees a switcher), loads
the person's memberships in one query, and answers 403 when the roles do not fit. Objects are
then looked up by selectors that take the tenant and filter on it (`run_by_id(run_id,
tenant=request.tenant)`, the inbox's and the queue's lists), so another tenant's id is simply
a 404.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import wraps
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from control.foundation.tenancy import verified_memberships
from control.models import Membership, Role, Tenant

SESSION_TENANT_KEY = "countersign_tenant"
READER_ROLES = frozenset(Role.values)
INBOX_READER_ROLES = frozenset({Role.OPERATOR, Role.ADMIN, Role.AUDITOR})
ADMIN_ROLES = frozenset({Role.ADMIN})


@dataclass(frozen=True)
class TenantChoice:
    tenant: Tenant
    roles: frozenset[str]


class TenantRequest(HttpRequest):
    """A request past `tenant_member`, as the type checker should see it: what it sets, and
    django-htmx's details."""

    tenant: Tenant
    roles: frozenset[str]
    tenant_choices: list[TenantChoice]
    htmx: HtmxDetails


def memberships_of(user) -> list[TenantChoice]:
    """The tenants a person belongs to with their roles in each, by tenant name (one query);
    only memberships that verify count (control.foundation.tenancy.MEMBERSHIP_ROWS)."""
    return _memberships(user)[0]


def _memberships(user) -> tuple[list[TenantChoice], list[str]]:
    """memberships_of, and a sentence for each membership row refused because it does not
    verify (for the 403 and its audit entry)."""
    by_tenant: dict[object, tuple[Tenant, set[str]]] = {}
    rows = Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")
    verified, refused = verified_memberships(rows)
    for membership in verified:
        by_tenant.setdefault(membership.tenant_id, (membership.tenant, set()))[1].add(
            membership.role
        )
    choices = [TenantChoice(tenant, frozenset(roles)) for tenant, roles in by_tenant.values()]
    return choices, [
        f"the {row.role} membership in {row.tenant.name} does not verify ({problem})"
        for row, problem in refused
    ]


def _chosen(request: HttpRequest, choices: list[TenantChoice]) -> TenantChoice:
    wanted = request.session.get(SESSION_TENANT_KEY)
    for choice in choices:
        if str(choice.tenant.pk) == wanted:
            return choice
    return choices[0]


def tenant_member(*roles: str):
    """Page decorator: login, a tenant, and at least one of `roles` there (any role if none).

    Sets request.tenant, request.roles (in that tenant) and request.tenant_choices."""
    allowed = frozenset(roles) or READER_ROLES

    def decorator(view):
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                if request.htmx:
                    return HttpResponseClientRedirect(reverse("login"))
                return redirect_to_login(request.get_full_path())
            choices, refused = _memberships(request.user)
            # A forged or altered membership row grants nothing; say so, so that the 403 and
            # its audit entry (auth.denied) name the row an admin must re-add.
            unverified = f" Refused: {'; '.join(refused)}." if refused else ""
            if not choices:
                raise PermissionDenied(
                    f"You are not a member of any tenant. Ask an admin.{unverified}"
                )
            chosen = _chosen(request, choices)
            request.tenant = chosen.tenant
            request.roles = chosen.roles
            request.tenant_choices = choices
            if not chosen.roles & allowed:
                needed = " or ".join(sorted(allowed))
                raise PermissionDenied(
                    f"This needs the {needed} role in {chosen.tenant.name}.{unverified}"
                )
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def can_decide(request: HttpRequest) -> bool:
    return bool(getattr(request, "roles", frozenset()) & {Role.OPERATOR, Role.ADMIN})


def is_admin(request: HttpRequest) -> bool:
    return Role.ADMIN in getattr(request, "roles", frozenset())


def safe_next(request: HttpRequest, fallback: str) -> str:
    """The `next` the form carried when it is ours, else `fallback` (no open redirects)."""
    candidate = request.POST.get("next") or request.GET.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return fallback


# Where each role starts its day, in order of preference for people with several roles.
LANDINGS = (
    (Role.OPERATOR, "inbox"),
    (Role.ADMIN, "inbox"),
    (Role.RECONCILER, "case_list"),
    (Role.AUDITOR, "receipt_ledger"),
)
LISTS_BY_PREFIX = (("run", "run_list"), ("case", "case_list"), ("receipt", "receipt_ledger"))


@require_GET
@tenant_member()
def home(request: HttpRequest) -> HttpResponse:
    """After login: the page the person's roles in the current tenant make most useful."""
    name = next(page for role, page in LANDINGS if role in request.roles)
    return HttpResponseRedirect(reverse(name))


def _landing_after_switch(path: str) -> str:
    """A page of one object belongs to the old tenant; land on its list instead."""
    try:
        match = resolve(path.split("?", 1)[0])
    except Resolver404:
        return reverse("home")
    if not match.kwargs:
        return path
    url_name = match.url_name or ""
    return reverse(
        next((page for prefix, page in LISTS_BY_PREFIX if url_name.startswith(prefix)), "home")
    )


@require_POST
@tenant_member()
def tenant_switch(request: HttpRequest) -> HttpResponse:
    """Makes another of the person's tenants the current one; unknown ids change nothing."""
    wanted = request.POST.get("tenant", "")
    if any(str(choice.tenant.pk) == wanted for choice in request.tenant_choices):
        request.session[SESSION_TENANT_KEY] = wanted
    return HttpResponseRedirect(_landing_after_switch(safe_next(request, reverse("home"))))


def pretty_json(value) -> str:
    """Readable JSON for people: indented, keys sorted, non-ASCII kept (templates escape it)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def compact_json(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def with_query(path: str, query, **changes) -> str:
    """`path` with the page's query string, `changes` applied and empty values dropped:
    the next page keeps the filters, a new filter starts from the first page."""
    params = {key: value for key, value in query.items() if value and key not in changes}
    params.update({key: value for key, value in changes.items() if value})
    return f"{path}?{urlencode(params)}" if params else path
