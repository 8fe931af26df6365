"""Every URL pattern x two tenants x each role, GET and POST.

Each pattern of the resolver is either a tenant page with an explicit role rule below, or in
a category that answers for itself with a reason (and its own tests). A pattern in neither
fails the test, so a new page cannot ship without saying who may use it. For a tenant page:
an allowed role is served, a missing role is 403, a person of another tenant gets 404 for an
object of this one (and a list that does not show it), and nobody logged out gets in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.urls import URLResolver, get_resolver
from django.utils import timezone

from reconciliation.services import case_open
from runs.services import PlanItem, approval_decide, plan_propose, standing_grant_propose
from tests.factories import make_action, make_observation, make_run, make_tenant, make_user
from tests.reconciliation.test_cases import make_uncertain

pytestmark = pytest.mark.django_db

ROLES = ("operator", "reconciler", "auditor", "admin")
ALL = frozenset(ROLES)
DECIDERS = frozenset({"operator", "admin"})
RECONCILERS = frozenset({"reconciler", "admin"})
AUDITORS = frozenset({"auditor", "admin"})
NOBODY = frozenset()

# Prefixes that are not tenant pages, each with why and where it is tested.
CATEGORIES = {
    "admin/": "Django admin: staff only, read-only for everyone (tests/security/test_admin.py)",
    "django-rq/": "django-rq's queue pages: superusers only (tests/security/test_dashboard.py)",
    "api/v1/": "the agent API: tenant tokens, other tenants 404 (tests/api/test_cross_tenant.py)",
    "sandbox/": (
        "the demo's external systems: no Countersign auth, like a third party's API; mounted "
        "only with SANDBOX_ENABLED (tests/security/test_sandbox_switch.py)"
    ),
    "accounts/": (
        "login (public), logout, password change (tests/security/test_passwords.py), one's "
        "own time zone (tests/pages/test_time_zones.py)"
    ),
    "mcp": "the MCP gateway: tenant tokens, 401 without (tests/gateway/test_mcp_http.py)",
    "decide/": (
        "a mail's decision link: the signed token is the credential, bound to one person "
        "(tests/pages/test_decision_links.py)"
    ),
    "healthz": "load balancer health check: public, answers database and Redis status only",
    ".well-known/": "public by design: the evidence keys' public halves, nothing secret",
    "metrics": "Prometheus scrape: its own token or network rule (tests/bench)",
}


@dataclass(frozen=True)
class Rule:
    get: frozenset[str] | None  # roles served on GET; None: the page takes POST only
    post: frozenset[str] | None  # roles allowed to POST; None: the page takes GET only
    obj: str | None = None  # the URL names one object of the tenant: run, action, write, case
    get_status: int = 200


PAGES = {
    "home": Rule(get=ALL, post=None, get_status=302),
    "inbox": Rule(get=DECIDERS | {"auditor"}, post=None),
    "inbox_bulk": Rule(get=None, post=DECIDERS),
    "inbox_approve": Rule(get=None, post=DECIDERS, obj="action"),
    "inbox_reject": Rule(get=None, post=DECIDERS, obj="action"),
    "inbox_edit": Rule(get=DECIDERS, post=DECIDERS, obj="action"),
    "inbox_ask_again": Rule(get=None, post=DECIDERS, obj="action"),
    "inbox_target_now": Rule(get=DECIDERS | {"auditor"}, post=None, obj="action"),
    "inbox_plan": Rule(get=DECIDERS | {"auditor"}, post=None, obj="plan"),
    "inbox_plan_approve": Rule(get=None, post=DECIDERS, obj="plan"),
    "inbox_plan_drop": Rule(get=None, post=DECIDERS, obj="plan"),
    "inbox_plan_reject": Rule(get=None, post=DECIDERS, obj="plan"),
    "run_list": Rule(get=ALL, post=None),
    "run_detail": Rule(get=ALL, post=None, obj="run"),
    "run_cancel": Rule(get=DECIDERS, post=DECIDERS, obj="run"),
    "action_retry_now": Rule(get=None, post=DECIDERS, obj="write"),
    "action_give_up": Rule(get=None, post=DECIDERS, obj="write"),
    "tool_list": Rule(get=DECIDERS, post=None),
    "tool_policies": Rule(get=frozenset({"admin"}), post=frozenset({"admin"})),
    "standing_rule_create": Rule(get=None, post=frozenset({"admin"})),
    "standing_rule_approve": Rule(get=None, post=frozenset({"admin"}), obj="rule"),
    "standing_rule_revoke": Rule(get=None, post=frozenset({"admin"}), obj="rule"),
    "tenant_switch": Rule(get=None, post=ALL),
    "receipt_ledger": Rule(get=AUDITORS, post=None),
    "receipt_export": Rule(get=AUDITORS, post=None),
    "evidence_download": Rule(get=AUDITORS, post=None),
    "audit_log": Rule(get=AUDITORS, post=None),
    "audit_export_csv": Rule(get=AUDITORS, post=None),
    "audit_export_jsonl": Rule(get=AUDITORS, post=None),
    "case_list": Rule(get=ALL, post=None),
    "case_detail": Rule(get=ALL, post=None, obj="case"),
    "case_resolve": Rule(get=None, post=RECONCILERS, obj="case"),
    "case_probe_now": Rule(get=None, post=RECONCILERS, obj="case"),
}


def url_patterns():
    """(route, name) of every pattern the project's resolver knows."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern.name

    return list(walk(get_resolver().url_patterns))


def test_every_url_pattern_is_a_ruled_page_or_in_a_category():
    uncovered = [
        (route, name)
        for route, name in url_patterns()
        if name not in PAGES and not route.startswith(tuple(CATEGORIES))
    ]
    assert uncovered == [], f"patterns nobody said who may use: {uncovered}"
    project_names = {name for _, name in url_patterns()}
    assert set(PAGES) <= project_names, (
        f"rules for pages that are gone: {set(PAGES) - project_names}"
    )


@pytest.fixture
def world(settings):
    settings.SANDBOX_URL = "http://127.0.0.1:9/sandbox/"  # probes find the provider down
    home, away = make_tenant(), make_tenant()
    people = {}
    for tenant in (home, away):
        for role in ROLES:
            people[tenant.pk, role] = make_user(tenant, role)
    waiting = make_action(make_run(home))
    doubtful = make_action(make_run(home), action_id="doubt", target="ticket-9")
    approval_decide(
        action=doubtful,
        approver=people[home.pk, "operator"],
        decision="approve",
        seen_digest=doubtful.intent_digest,
        seen_state_version=doubtful.base_version,
    )
    case = make_uncertain(doubtful) or case_open(action=doubtful)
    rule = standing_grant_propose(
        tenant=home,
        tool="payment.refund",
        name="refunds under $50",
        proposer=people[home.pk, "admin"],
        expires_at=timezone.now() + timedelta(days=7),
    )
    plan_run = make_run(home)
    plan, _ = plan_propose(
        run=plan_run,
        items=[PlanItem("notify-1", "notify.send", "ops@example.com", {"body": "hi"})],
        observation=make_observation(plan_run),
        proposed_by="agent",
    )
    objects = {
        "plan": {"plan_pk": plan.pk},
        "rule": {"rule_pk": rule.pk},
        "action": {"action_pk": waiting.pk},
        "run": {"run_id": waiting.run_id},
        "write": {"run_id": waiting.run_id, "action_pk": waiting.pk},
        "case": {"case_id": case.pk},
    }
    return home, away, people, objects


def _url(name: str, rule: Rule, objects) -> str:
    from django.urls import reverse

    return reverse(name, kwargs=objects[rule.obj] if rule.obj else None)


def _check(status: int, *, method: str, takes: frozenset[str] | None, role: str, rule: Rule):
    if takes is None:
        return status == 405
    if role not in takes:
        return status == 403
    if method == "get":
        return status == rule.get_status
    return status not in (403, 404, 405) and status < 500


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_role_of_the_tenant_gets_exactly_its_rule(client, world, name):
    home, _, people, objects = world
    rule = PAGES[name]
    url = _url(name, rule, objects)
    for role in ROLES:
        client.force_login(people[home.pk, role])
        for method, takes in (("get", rule.get), ("post", rule.post)):
            status = getattr(client, method)(url).status_code
            assert _check(status, method=method, takes=takes, role=role, rule=rule), (
                f"{method.upper()} {url} as {role}: {status}"
            )


@pytest.mark.parametrize("name", sorted(n for n, rule in PAGES.items() if rule.obj))
def test_every_role_of_another_tenant_gets_404_for_this_tenants_objects(client, world, name):
    _, away, people, objects = world
    rule = PAGES[name]
    url = _url(name, rule, objects)
    for role in ROLES:
        client.force_login(people[away.pk, role])
        for method in ("get", "post"):
            takes = rule.get if method == "get" else rule.post
            response = getattr(client, method)(url)
            expected = {404} if takes is not None and role in takes else {403, 404, 405}
            assert response.status_code in expected, f"{method} {url} as {role} of another tenant"


def test_lists_never_show_another_tenants_objects(client, world):
    _, away, people, objects = world
    hidden = [str(objects["run"]["run_id"]), str(objects["case"]["case_id"])]
    for name in ("inbox", "run_list", "case_list", "receipt_ledger"):
        client.force_login(people[away.pk, "admin"])
        body = client.get(_url(name, PAGES[name], objects)).content.decode()
        assert not any(object_id in body for object_id in hidden), name


@pytest.mark.parametrize("name", sorted(PAGES))
def test_nobody_logged_out_gets_in(client, world, name):
    rule = PAGES[name]
    url = _url(name, rule, world[3])
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        assert response.status_code in (302, 405), f"{method} {url}: {response.status_code}"
        if response.status_code == 302 and name != "home":
            assert "/accounts/login/" in response["Location"]


def test_a_person_without_any_tenant_is_refused(client, django_user_model, world):
    client.force_login(django_user_model.objects.create_user("drifter", password="x" * 20))
    for name, rule in PAGES.items():
        if rule.get is not None:
            assert client.get(_url(name, rule, world[3])).status_code == 403, name
