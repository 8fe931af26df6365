"""The Django admin: read-only for everyone (users and groups too), scoped to the viewer's
tenants, no N+1."""

from __future__ import annotations

from itertools import count

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from control.models import ApiToken, AuditEntry, Membership, Tenant
from control.services import api_token_create
from reconciliation.models import ReconciliationCase
from runs.models import Action, Approval, Attempt, Checkpoint, Receipt, Run, RunEvent
from tests.factories import make_user
from tests.receipts.support import approved_action, send_with_receipt, send_without_answer

pytestmark = pytest.mark.django_db
_numbers = count(1)

EVIDENCE = (
    Receipt,
    RunEvent,
    Approval,
    Attempt,
    AuditEntry,
    ReconciliationCase,
    Run,
    Action,
    Checkpoint,
    Tenant,
    Membership,
    ApiToken,
)


def _url(model, page: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{page}", args=args)


def _grow(tenant, approver, count: int) -> None:
    """`count` proven writes and `count` in doubt with their cases, and a token each."""
    for _ in range(count):
        number = next(_numbers)
        send_with_receipt(approved_action(tenant, approver), receipt_id=f"rcpt-{number}")
        send_without_answer(approved_action(tenant, approver))
        api_token_create(tenant=tenant, name=f"agent-{number}", actor="tests")


@pytest.fixture
def evidence(tenant, approver):
    _grow(tenant, approver, 1)


def test_every_piece_of_evidence_is_registered_read_only(rf, superuser):
    request = rf.get("/admin/")
    request.user = superuser

    for model in EVIDENCE:
        model_admin = admin.site._registry[model]
        assert model_admin.has_view_permission(request), model
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
        assert model_admin.get_actions(request) == {}, model


def test_every_model_the_admin_knows_is_read_only_without_actions(rf, superuser, django_user_model):
    request = rf.get("/admin/")
    request.user = superuser
    registered = admin.site._registry

    for model, model_admin in registered.items():
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
        assert model_admin.get_actions(request) == {}, model
    assert {django_user_model, Group} <= set(registered)


@pytest.mark.parametrize("model", EVIDENCE, ids=lambda model: model.__name__)
def test_a_superuser_can_look_but_not_add_change_or_delete(client, superuser, evidence, model):
    client.force_login(superuser)
    row = model.objects.first()
    change = _url(model, "change", row.pk)
    # Each refusal below adds its own auth.denied entry; nothing else may appear.
    rows = model.objects.exclude(verb="auth.denied") if model is AuditEntry else model.objects
    before = rows.count()

    assert client.get(_url(model, "changelist")).status_code == 200
    assert client.get(change).status_code == 200
    assert client.get(_url(model, "add")).status_code == 403
    assert client.post(_url(model, "add"), {}).status_code == 403
    assert client.post(_url(model, "delete", row.pk), {"post": "yes"}).status_code == 403
    response = client.post(change, {"status": "tampered", "reason": "tampered"})
    assert response.status_code == 403
    assert rows.count() == before
    assert AuditEntry.objects.filter(verb="auth.denied", actor="root").count() == 4


def test_no_changelist_offers_bulk_delete(client, superuser, evidence):
    client.force_login(superuser)

    response = client.get(_url(Receipt, "changelist"))

    assert response.status_code == 200
    assert "delete_selected" not in response.content.decode()


def _changelist_queries(client) -> dict[str, list[str]]:
    queries = {}
    for model in EVIDENCE:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(_url(model, "changelist")).status_code == 200
        queries[model.__name__] = [query["sql"][:160] for query in captured.captured_queries]
    return queries


def test_every_changelist_costs_the_same_queries_with_many_rows(
    client, superuser, tenant, approver
):
    client.force_login(superuser)
    _grow(tenant, approver, 2)
    few = _changelist_queries(client)
    _grow(tenant, approver, 12)
    many = _changelist_queries(client)

    for model in EVIDENCE:
        name = model.__name__
        assert len(many[name]) == len(few[name]), (name, many[name])


def _found(client, model, term: str) -> list:
    response = client.get(_url(model, "changelist"), {"q": term})
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def test_receipts_are_found_by_key_receipt_id_target_and_run(client, superuser, tenant, approver):
    client.force_login(superuser)
    wanted = send_with_receipt(
        approved_action(tenant, approver, target="ticket-42"), receipt_id="rcpt-wanted"
    )
    send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-other")

    for term in (wanted.idempotency_key, "rcpt-wanted", "ticket-42", str(wanted.run_id)):
        assert _found(client, Receipt, term) == [wanted.receipt], term
    assert _found(client, Receipt, "not-a-uuid-nor-anything") == []


def test_actions_attempts_and_cases_are_found_by_key_and_receipt_id(
    client, superuser, tenant, approver
):
    client.force_login(superuser)
    proven = send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-proven")
    in_doubt = send_without_answer(approved_action(tenant, approver, target="ticket-9"))

    assert _found(client, Action, "rcpt-proven") == [proven]
    assert _found(client, Action, in_doubt.idempotency_key) == [in_doubt]
    assert [attempt.action for attempt in _found(client, Attempt, "rcpt-proven")] == [proven]
    assert [case.action for case in _found(client, ReconciliationCase, "ticket-9")] == [in_doubt]
    assert [event.run_id for event in _found(client, RunEvent, str(proven.run_id))] != []
    assert {event.run_id for event in _found(client, RunEvent, str(proven.run_id))} == {
        proven.run_id
    }


def test_a_token_page_never_shows_its_hash(client, superuser, tenant):
    client.force_login(superuser)
    row, token = api_token_create(tenant=tenant, name="agent", actor="tests")

    pages = [
        client.get(_url(ApiToken, "changelist")).content.decode(),
        client.get(_url(ApiToken, "change", row.pk)).content.decode(),
    ]

    for page in pages:
        assert row.prefix in page
        assert row.token_hash not in page
        assert row.token_hash.removeprefix("sha256:") not in page
        assert token not in page


# --- Staff who are not superusers: only their tenants, only with auditor or admin -------------


def test_staff_auditors_see_only_their_tenants_evidence(
    client, staff_auditor, tenant, other_tenant, approver
):
    ours = send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-ours")
    theirs = send_with_receipt(
        approved_action(other_tenant, make_user(other_tenant)), receipt_id="rcpt-theirs"
    )
    client.force_login(staff_auditor)

    assert _found(client, Receipt, "") == [ours.receipt]
    assert [event.run_id for event in _found(client, RunEvent, "")] != []
    assert {event.run_id for event in _found(client, RunEvent, "")} == {ours.run_id}
    assert {tenant_row.name for tenant_row in _found(client, Tenant, "")} == {"acme"}
    assert client.get(_url(Receipt, "change", ours.receipt.pk)).status_code == 200
    assert client.get(_url(Receipt, "change", theirs.receipt.pk)).status_code == 302
    assert "globex" not in client.get(_url(Receipt, "changelist")).content.decode()


def test_staff_auditors_do_not_see_audit_entries_of_no_tenant(client, staff_auditor, tenant):
    client.force_login(staff_auditor)

    entries = _found(client, AuditEntry, "")

    assert entries
    assert {entry.tenant_id for entry in entries} == {tenant.pk}
    assert AuditEntry.objects.filter(tenant__isnull=True).exists()


@pytest.mark.parametrize("role", ["operator", "reconciler"])
def test_staff_without_the_auditor_or_admin_role_are_refused(client, tenant, role):
    person = make_user(tenant, role)
    person.is_staff = True
    person.save(update_fields=["is_staff"])
    client.force_login(person)

    assert client.get(_url(Receipt, "changelist")).status_code == 403
    assert "Receipts" not in client.get(reverse("admin:index")).content.decode()


def test_a_tenant_auditor_who_is_not_staff_is_sent_to_the_admin_login(client, tenant):
    client.force_login(make_user(tenant, "auditor"))

    response = client.get(_url(Receipt, "changelist"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_addmember_admin_site_lets_an_auditor_in_and_refuses_it_for_an_operator(client, tenant):
    call_command("addmember", tenant=tenant.name, username="ada", role="auditor", admin_site=True)
    client.force_login(get_user_model().objects.get(username="ada"))
    assert client.get(_url(Receipt, "changelist")).status_code == 200
    granted = AuditEntry.objects.filter(verb="member.add", data__username="ada").get()
    assert granted.data["admin_site"] is True

    with pytest.raises(CommandError, match="not for the operator role"):
        call_command(
            "addmember", tenant=tenant.name, username="otto", role="operator", admin_site=True
        )
    assert not get_user_model().objects.filter(username="otto").exists()


# --- Users and groups: managed by commands and audited services, never here ------------------


def test_a_superuser_can_neither_add_nor_edit_nor_delete_people(
    client, superuser, approver, django_user_model
):
    client.force_login(superuser)
    change = _url(django_user_model, "change", approver.pk)
    before = django_user_model.objects.values().get(pk=approver.pk)
    grant = {"username": "olivia", "is_staff": "on", "is_superuser": "on", "is_active": "on"}

    assert client.get(change).status_code == 200
    assert client.post(change, grant).status_code == 403
    assert client.post(_url(django_user_model, "add"), {"username": "intruder"}).status_code == 403
    assert (
        client.post(_url(django_user_model, "delete", approver.pk), {"post": "yes"}).status_code
        == 403
    )
    # Django's own user admin had a password page here; the read-only one has none.
    password_page = change.replace("/change/", "/password/")
    set_password = {"password1": "a-new-long-password", "password2": "a-new-long-password"}
    assert client.post(password_page, set_password).status_code != 200

    assert django_user_model.objects.values().get(pk=approver.pk) == before
    assert not django_user_model.objects.filter(username="intruder").exists()


def test_a_superuser_can_neither_add_nor_rename_groups(client, superuser):
    client.force_login(superuser)
    group = Group.objects.create(name="readers")

    assert client.get(_url(Group, "change", group.pk)).status_code == 200
    assert client.post(_url(Group, "change", group.pk), {"name": "writers"}).status_code == 403
    assert client.post(_url(Group, "add"), {"name": "writers"}).status_code == 403

    assert list(Group.objects.values_list("name", flat=True)) == ["readers"]


def test_a_users_page_never_shows_the_password_hash(client, superuser, approver, django_user_model):
    client.force_login(superuser)

    page = client.get(_url(django_user_model, "change", approver.pk)).content.decode()

    assert "olivia" in page
    assert approver.password.split("$")[-1] not in page


def test_staff_auditors_see_neither_users_nor_groups(client, staff_auditor, django_user_model):
    client.force_login(staff_auditor)

    assert client.get(_url(django_user_model, "changelist")).status_code == 403
    assert client.get(_url(django_user_model, "change", staff_auditor.pk)).status_code == 403
    assert client.get(_url(Group, "changelist")).status_code == 403
