"""Logging in: throttled per username and per address (behind proxies too), audited without
one row per failure, and the session is fresh."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from control.auth.summaries import login_failures_summarize
from control.foundation.audit import audit_verify
from control.models import AuditEntry, LoginFailure
from tests.factories import make_user
from tests.security.conftest import PASSWORD

pytestmark = pytest.mark.django_db
LOCKED = "Too many failed logins"


@pytest.fixture
def person(tenant):
    return make_user(tenant, "operator", username="olga")


def _login(client: Client, username: str, password: str, address: str = "203.0.113.7", **extra):
    return client.post(
        reverse("login"),
        {"username": username, "password": password},
        REMOTE_ADDR=address,
        **extra,
    )


def _errors(response) -> str:
    return " ".join(response.context["form"].non_field_errors())


def _fail(client: Client, times: int, username: str = "olga", address: str = "203.0.113.7"):
    for _ in range(times):
        response = _login(client, username, "wrong-password", address)
        assert response.status_code == 200
    return response


def test_five_wrong_passwords_lock_the_username_even_for_the_right_one(client, person):
    fifth = _fail(client, 5)

    response = _login(client, "olga", PASSWORD)

    assert LOCKED in _errors(fifth)
    assert response.status_code == 200
    assert LOCKED in _errors(response)
    assert "15 more minute(s)" in _errors(response)
    assert SESSION_KEY not in client.session


def test_four_wrong_passwords_still_let_the_right_one_in(client, person):
    fourth = _fail(client, 4)

    response = _login(client, "olga", PASSWORD)

    assert LOCKED not in _errors(fourth)
    assert response.status_code == 302
    assert client.session[SESSION_KEY] == str(person.pk)


def test_a_successful_login_forgets_the_usernames_earlier_failures(client, person):
    _fail(client, 4)
    _login(client, "olga", PASSWORD)
    client.logout()

    fifth = _fail(client, 1)

    assert LOCKED not in _errors(fifth)
    assert _login(client, "olga", PASSWORD).status_code == 302


def test_the_username_lock_holds_from_any_address_and_in_any_case(client, person):
    _fail(client, 5, address="203.0.113.7")

    response = _login(client, "OLGA", PASSWORD, address="198.51.100.1")

    assert LOCKED in _errors(response)


def test_the_lock_ends_after_fifteen_minutes(client, person):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        _fail(client, 5)
        traveller.shift(timedelta(minutes=14, seconds=59))
        assert LOCKED in _errors(_login(client, "olga", PASSWORD))
        traveller.shift(timedelta(seconds=2))

        response = _login(client, "olga", PASSWORD)

    assert response.status_code == 302


def test_failures_older_than_the_window_do_not_count(client, person):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        _fail(client, 4)
        traveller.shift(timedelta(minutes=16))
        fifth = _fail(client, 1)

    assert LOCKED not in _errors(fifth)
    # Kept, without counting, until a summary takes them into the audit chain.
    assert LoginFailure.objects.count() == 5


def test_an_unknown_username_locks_like_a_known_one(client):
    fifth = _fail(client, 5, username="nobody-here")

    assert LOCKED in _errors(fifth)


def test_one_address_guessing_many_usernames_is_locked(client, tenant, settings):
    settings.COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    make_user(tenant, "operator", username="victor")
    for username in ("alice", "bob"):
        _fail(client, 1, username=username)

    third = _fail(client, 1, username="carol")
    response = _login(client, "victor", PASSWORD)
    elsewhere = _login(Client(), "victor", PASSWORD, address="198.51.100.1")

    assert LOCKED in _errors(third)
    assert LOCKED in _errors(response)
    assert elsewhere.status_code == 302


def test_x_forwarded_for_is_ignored_unless_a_proxy_is_trusted(client, person):
    for number in range(5):
        _login(client, "olga", "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{number}")

    assert set(LoginFailure.objects.values_list("address", flat=True)) == {"203.0.113.7"}


def test_behind_a_trusted_proxy_the_address_it_appended_counts(client, settings, tenant):
    settings.COUNTERSIGN_TRUSTED_PROXY_COUNT = 1
    settings.COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS = 2

    _login(client, "alice", "wrong", HTTP_X_FORWARDED_FOR="10.9.9.9, 192.0.2.10")
    second = _login(client, "bob", "wrong", HTTP_X_FORWARDED_FOR="10.8.8.8, 192.0.2.10")
    other = _login(client, "carol", "wrong", HTTP_X_FORWARDED_FOR="192.0.2.11")

    assert LOCKED in _errors(second)
    assert LOCKED not in _errors(other)
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {
        "192.0.2.10",
        "192.0.2.11",
    }


def test_two_clients_behind_one_proxy_are_throttled_separately(client, settings, tenant):
    settings.COUNTERSIGN_TRUSTED_PROXY_COUNT = 1
    settings.COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    make_user(tenant, "operator", username="bea")
    proxy = "10.0.0.1"
    for username in ("alice", "bob", "carol"):
        _login(client, username, "wrong", proxy, HTTP_X_FORWARDED_FOR="192.0.2.10")

    locked = _login(Client(), "bea", PASSWORD, proxy, HTTP_X_FORWARDED_FOR="192.0.2.10")
    other_client = _login(Client(), "bea", PASSWORD, proxy, HTTP_X_FORWARDED_FOR="192.0.2.11")

    assert LOCKED in _errors(locked)
    assert other_client.status_code == 302


def test_a_spoofed_leftmost_forwarded_entry_does_not_evade_the_throttle(client, settings, person):
    settings.COUNTERSIGN_TRUSTED_PROXY_COUNT = 2
    settings.COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    # The outer proxy appends the client (192.0.2.10), the inner one the outer proxy.
    for number, username in enumerate(("alice", "bob", "carol")):
        forwarded = f"198.51.100.{number}, 192.0.2.10, 10.0.0.2"
        _login(client, username, "wrong", "10.0.0.3", HTTP_X_FORWARDED_FOR=forwarded)

    response = _login(
        client,
        "olga",
        PASSWORD,
        "10.0.0.3",
        HTTP_X_FORWARDED_FOR="203.0.113.99, 192.0.2.10, 10.0.0.2",
    )

    assert LOCKED in _errors(response)
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {"192.0.2.10"}


def test_fewer_forwarded_entries_than_trusted_proxies_count_against_the_socket_address(
    client, settings, person
):
    settings.COUNTERSIGN_TRUSTED_PROXY_COUNT = 2

    _login(client, "olga", "wrong", "10.0.0.3", HTTP_X_FORWARDED_FOR="192.0.2.10")

    assert LoginFailure.objects.get().address == "10.0.0.3"


def test_the_lock_holds_for_every_way_of_logging_in(client, person):
    _fail(client, 5)

    assert client.login(username="olga", password=PASSWORD) is False
    admin_login = client.post(
        reverse("admin:login"),
        {"username": "olga", "password": PASSWORD},
        REMOTE_ADDR="198.51.100.1",
    )
    assert LOCKED in " ".join(admin_login.context["form"].non_field_errors())


def test_the_admin_login_is_throttled_too(client, superuser):
    for _ in range(5):
        client.post(reverse("admin:login"), {"username": "root", "password": "wrong"})

    response = client.post(reverse("admin:login"), {"username": "root", "password": PASSWORD})

    assert response.status_code == 200
    assert LOCKED in " ".join(response.context["form"].non_field_errors())


# --- Audit ------------------------------------------------------------------------------------


def test_a_login_is_audited_with_the_address(client, person):
    _login(client, "olga", PASSWORD)

    entry = AuditEntry.objects.get(verb="auth.login")
    assert (entry.actor, entry.object_id, entry.data) == (
        "olga",
        str(person.pk),
        {"address": "203.0.113.7", "failures_before": 0},
    )


def test_a_login_records_how_many_failures_preceded_it(client, person):
    _fail(client, 3)

    _login(client, "olga", PASSWORD)

    assert AuditEntry.objects.get(verb="auth.login").data["failures_before"] == 3
    assert not LoginFailure.objects.exists()


def test_a_failed_login_is_counted_not_audited_and_its_password_is_kept_nowhere(client, person):
    _login(client, "Olga", "hunter2-wrong")

    failure = LoginFailure.objects.get()
    assert (failure.username, failure.address) == ("olga", "203.0.113.7")
    assert "hunter2" not in str(vars(failure))
    assert not AuditEntry.objects.filter(verb__startswith="auth.").exists()


def test_a_lock_is_audited_once_and_refused_attempts_add_nothing(client, person):
    _fail(client, 5)
    _fail(client, 3)
    _login(client, "olga", PASSWORD)

    assert AuditEntry.objects.filter(verb__startswith="auth.").count() == 1
    lock = AuditEntry.objects.get(verb="auth.login_locked")
    assert lock.data["locked"] == ["username"]
    assert lock.data["username"] == "olga"
    assert LoginFailure.objects.count() == 5
    assert not AuditEntry.objects.filter(verb="auth.login").exists()
    assert audit_verify().ok


def test_fifty_failed_logins_write_one_summary_not_fifty_audit_rows(client):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        # Ten addresses try five usernames each: under every limit, so nothing locks.
        for number in range(50):
            _login(client, f"user-{number}", "wrong", address=f"192.0.2.{number % 10}")
        assert not AuditEntry.objects.filter(verb__startswith="auth.").exists()
        # Failures are summarized once they are two periods (window, lock) old.
        traveller.shift(timedelta(minutes=30))
        assert login_failures_summarize() == 0
        traveller.shift(timedelta(seconds=1))

        summarized = login_failures_summarize()
        again = login_failures_summarize()

    summary = AuditEntry.objects.get(verb__startswith="auth.")
    assert (summary.verb, summary.actor) == ("auth.login_failures", "anonymous")
    assert summary.reason == "50 failed logins, summarized"
    data = summary.data
    assert (data["failures"], data["usernames"], data["addresses"], data["locks"]) == (
        50,
        50,
        10,
        0,
    )
    assert data["by_address"] == {f"192.0.2.{number}": 5 for number in range(10)}
    assert len(data["by_username"]) == 10
    assert (summarized, again) == (50, 0)
    assert not LoginFailure.objects.exists()
    assert audit_verify().ok


def test_a_summary_keeps_the_failures_that_can_still_count(client, person):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        _fail(client, 2)
        traveller.shift(timedelta(minutes=31))
        _fail(client, 1)  # summarizes the two on its way in

    summary = AuditEntry.objects.get(verb="auth.login_failures")
    assert summary.data["failures"] == 2
    assert summary.data["by_username"] == {"olga": 2}
    assert LoginFailure.objects.count() == 1


def test_a_logout_is_audited(client, person):
    _login(client, "olga", PASSWORD)

    client.post(reverse("logout"))

    assert AuditEntry.objects.get(verb="auth.logout").actor == "olga"


# --- Sessions ---------------------------------------------------------------------------------


def test_logging_in_rotates_the_session_key(client, person):
    session = client.session
    session["before-login"] = True
    session.save()
    before = session.session_key

    _login(client, "olga", PASSWORD)

    after = client.cookies["sessionid"].value
    assert after != before
    assert not Session.objects.filter(session_key=before).exists()
    assert Session.objects.filter(session_key=after).exists()


def test_logging_out_deletes_the_session_on_the_server(client, person):
    _login(client, "olga", PASSWORD)
    key = client.cookies["sessionid"].value
    assert Session.objects.filter(session_key=key).exists()

    response = client.post(reverse("logout"))

    assert response.status_code == 302
    assert not Session.objects.filter(session_key=key).exists()
    # The old cookie, replayed, is nobody.
    replay = Client()
    replay.cookies["sessionid"] = key
    assert replay.get("/receipts/").status_code == 302


def test_a_session_lasts_a_working_day_at_most(settings):
    assert settings.SESSION_COOKIE_AGE <= 12 * 3600
