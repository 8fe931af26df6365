"""Passwords: no reset (no mail); changing one's own is throttled like logging in, and audited."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import NoReverseMatch, reverse

from control.foundation.audit import audit_verify
from control.models import AuditEntry
from tests.factories import make_user
from tests.security.conftest import PASSWORD

pytestmark = pytest.mark.django_db
NEW_PASSWORD = "another-long-test-password"
LOCKED = "Too many failed logins"


@pytest.fixture
def person(tenant):
    return make_user(tenant, "operator", username="olga")


@pytest.fixture
def olga(client, person):
    client.force_login(person)
    return client


def _change(client: Client, old: str, new: str = NEW_PASSWORD):
    return client.post(
        reverse("password_change"),
        {"old_password": old, "new_password1": new, "new_password2": new},
        REMOTE_ADDR="203.0.113.7",
    )


def _errors(response) -> str:
    return " ".join(response.context["form"].errors.get("old_password", []))


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/reset/done/",
    ],
)
def test_password_reset_is_not_mounted(client, person, path):
    assert client.get(path).status_code == 404
    assert client.post(path, {"email": "olga@example.com"}).status_code == 404


def test_no_page_names_a_password_reset_url():
    for name in ("password_reset", "password_reset_done", "password_reset_complete"):
        with pytest.raises(NoReverseMatch):
            reverse(name)


def test_a_password_change_works_and_writes_one_audit_entry_without_the_password(olga, person):
    before = AuditEntry.objects.count()

    response = _change(olga, PASSWORD)

    assert response.status_code == 302
    assert response["Location"] == reverse("password_change_done")
    person.refresh_from_db()
    assert person.check_password(NEW_PASSWORD)
    entries = list(AuditEntry.objects.filter(seq__gt=before).values())
    assert [(entry["verb"], entry["actor"]) for entry in entries] == [
        ("auth.password_change", "olga")
    ]
    assert entries[0]["object_id"] == str(person.pk)
    assert entries[0]["data"] == {"address": "203.0.113.7"}
    assert PASSWORD not in str(entries)
    assert NEW_PASSWORD not in str(entries)
    assert audit_verify().ok
    # This session goes on; the done page and the site still answer it.
    assert olga.get(response["Location"]).status_code == 200
    assert olga.get(reverse("inbox")).status_code == 200


def test_a_password_change_ends_the_persons_other_sessions(olga, person):
    elsewhere = Client()
    elsewhere.force_login(person)
    assert elsewhere.get(reverse("inbox")).status_code == 200

    _change(olga, PASSWORD)

    assert elsewhere.get(reverse("inbox")).status_code == 302


def test_a_wrong_current_password_changes_nothing_and_is_audited(olga, person):
    response = _change(olga, "wrong-password")

    assert response.status_code == 200
    assert "incorrectly" in _errors(response)
    person.refresh_from_db()
    assert person.check_password(PASSWORD)
    refused = AuditEntry.objects.get(verb="auth.password_change_failed")
    assert (refused.actor, refused.object_id) == ("olga", str(person.pk))
    assert "wrong-password" not in str(refused.data)


def test_five_wrong_current_passwords_lock_the_change_even_for_the_right_one(olga, person):
    fourth = [_change(olga, "wrong-password") for _ in range(4)][-1]
    fifth = _change(olga, "wrong-password")

    response = _change(olga, PASSWORD)

    assert LOCKED not in _errors(fourth)
    assert LOCKED in _errors(fifth)
    assert response.status_code == 200
    assert LOCKED in _errors(response)
    person.refresh_from_db()
    assert person.check_password(PASSWORD)
    assert AuditEntry.objects.filter(verb="auth.password_change_failed").count() == 5
    assert AuditEntry.objects.filter(verb="auth.login_locked", object_id="olga").count() == 1
    assert not AuditEntry.objects.filter(verb="auth.password_change").exists()


def test_wrong_current_passwords_and_failed_logins_add_up(olga, person):
    guesser = Client()
    for _ in range(4):
        guesser.post(
            reverse("login"), {"username": "olga", "password": "wrong"}, REMOTE_ADDR="198.51.100.9"
        )

    response = _change(olga, "wrong-password")

    assert LOCKED in _errors(response)
    login = Client().post(reverse("login"), {"username": "olga", "password": PASSWORD})
    assert login.status_code == 200
    assert LOCKED in " ".join(login.context["form"].non_field_errors())


def test_nobody_logged_out_reaches_the_password_change(client, person):
    for method in ("get", "post"):
        response = getattr(client, method)(reverse("password_change"))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_the_admins_password_page_sends_to_the_throttled_one_and_sets_nothing(client, superuser):
    client.force_login(superuser)
    # Django's admin form asks for no current password: just the new one, twice.
    new = {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD}

    response = client.post(reverse("admin:password_change"), new)

    assert response.status_code == 302
    assert response["Location"] == reverse("password_change")
    superuser.refresh_from_db()
    assert superuser.check_password(PASSWORD)


def test_the_pages_that_link_to_accounts_render(client, olga):
    page = olga.get(reverse("password_change")).content.decode()
    inbox = olga.get(reverse("inbox")).content.decode()

    assert 'name="old_password"' in page
    assert f'href="{reverse("password_change")}"' in inbox
    assert Client().get(reverse("login")).status_code == 200
    assert Client().get(reverse("admin:login")).status_code == 200
