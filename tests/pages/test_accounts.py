"""Log in, log out, and the tenant switcher for people in several tenants."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_run, make_tenant, make_user
from tests.pages.conftest import client_for, make_waiting

pytestmark = pytest.mark.django_db


def test_a_member_logs_in_and_lands_in_the_inbox(client, tenant):
    make_user(tenant, "operator", username="olga")

    response = client.post(
        reverse("login"), {"username": "olga", "password": "a-long-test-password"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/")["Location"] == "/inbox/"
    assert client.get("/inbox/").status_code == 200


@pytest.mark.parametrize(
    ("role", "landing"),
    [("reconciler", "/reconciliation/"), ("auditor", "/receipts/"), ("admin", "/inbox/")],
)
def test_each_role_lands_where_its_work_is(client, tenant, role, landing):
    client.force_login(make_user(tenant, role))
    assert client.get("/")["Location"] == landing


def test_a_wrong_password_is_refused_with_a_message(client, tenant):
    make_user(tenant, "operator", username="olga")

    response = client.post(reverse("login"), {"username": "olga", "password": "wrong"})

    assert response.status_code == 200
    assert 'class="error" role="alert"' in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_logging_out_ends_the_session(operator_client):
    response = operator_client.post(reverse("logout"))

    assert response.status_code == 302
    assert operator_client.get(reverse("inbox")).status_code == 302


def test_an_htmx_request_without_a_session_is_sent_to_log_in(client):
    response = client.get(reverse("inbox"), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("login")


def test_a_person_in_no_tenant_is_told_so(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("nobody"))

    response = client.get(reverse("inbox"))

    assert response.status_code == 403
    assert "not a member of any tenant" in response.content.decode()


def test_a_person_in_two_tenants_switches_between_them(client):
    first, second = make_tenant("acme"), make_tenant("globex")
    make_user(first, "operator", username="sam")
    person = make_user(second, "operator", username="sam")
    theirs = make_waiting(second)
    client_for(client, person)

    before = client.get(reverse("inbox")).content.decode()
    response = client.post(
        reverse("tenant_switch"), {"tenant": str(second.pk), "next": reverse("inbox")}
    )
    after = client.get(reverse("inbox")).content.decode()

    assert 'id="tenant-select"' in before
    assert f"action-{theirs.pk}" not in before
    assert response["Location"] == reverse("inbox")
    assert f"action-{theirs.pk}" in after


def test_switching_from_a_page_of_one_run_lands_on_the_run_list(client):
    first, second = make_tenant("acme"), make_tenant("globex")
    make_user(first, "operator", username="sam")
    person = make_user(second, "auditor", username="sam")
    run = make_run(first)
    client_for(client, person)

    response = client.post(
        reverse("tenant_switch"),
        {"tenant": str(second.pk), "next": reverse("run_detail", args=[run.pk])},
    )

    assert response["Location"] == reverse("run_list")


def test_switching_to_a_tenant_one_is_not_in_changes_nothing(client, tenant, other_tenant):
    client_for(client, make_user(tenant, "operator"))
    theirs = make_waiting(other_tenant)

    client.post(reverse("tenant_switch"), {"tenant": str(other_tenant.pk)})

    assert f"action-{theirs.pk}" not in client.get(reverse("inbox")).content.decode()


def test_the_switch_refuses_to_redirect_elsewhere(operator_client, tenant):
    response = operator_client.post(
        reverse("tenant_switch"), {"tenant": str(tenant.pk), "next": "https://evil.example/"}
    )

    assert response["Location"] == reverse("home")


def test_roles_are_per_tenant(client):
    first, second = make_tenant("acme"), make_tenant("globex")
    make_user(first, "operator", username="sam")
    person = make_user(second, "auditor", username="sam")
    theirs = make_waiting(second)
    client_for(client, person)
    client.post(reverse("tenant_switch"), {"tenant": str(second.pk)})

    response = client.post(
        reverse("inbox_approve", args=[theirs.pk]),
        {"seen_digest": theirs.intent_digest, "seen_state_version": theirs.base_version},
    )

    assert response.status_code == 403
