"""Each person's time zone: chosen on their own page, in their session from login, and every
moment on their pages shown in it with its name, the relative beside."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from control.models import AuditEntry, Preference
from control.web.zones import SESSION_KEY
from tests.factories import make_action, make_run, make_user
from tests.pages.conftest import client_for

pytestmark = pytest.mark.django_db
PAGE = reverse("time_zone")


def test_a_person_chooses_a_zone_and_their_pages_show_moments_in_it(client, tenant):
    olivia = make_user(tenant, "operator", username="olivia")
    client_for(client, olivia)
    action = make_action(make_run(tenant))
    run_page = reverse("run_detail", args=[action.run_id])
    assert re.search(r"\d\d:\d\d:\d\d UTC</time>", client.get(run_page).content.decode())

    saved = client.post(PAGE, {"time_zone": "Asia/Tokyo"})

    assert saved.status_code == 302
    assert Preference.objects.get(user=olivia).time_zone == "Asia/Tokyo"
    page = client.get(run_page).content.decode()
    assert re.search(r"\d\d:\d\d:\d\d JST</time>", page)
    assert "UTC</time>" not in page
    assert ">Asia/Tokyo</a>" in page  # the header says which zone, and links to change it
    entry = AuditEntry.objects.filter(verb="user.time_zone").get()
    assert (entry.actor, entry.data) == ("olivia", {"time_zone": "Asia/Tokyo"})


def test_the_zone_follows_the_person_to_their_next_login(client, tenant):
    olivia = make_user(tenant, "operator", username="olivia")
    Preference.objects.create(user=olivia, time_zone="Europe/Paris")
    assert client.login(username="olivia", password="a-long-test-password")
    assert client.session[SESSION_KEY] == "Europe/Paris"


def test_an_unknown_zone_is_refused_and_nothing_changes(client, tenant):
    olivia = make_user(tenant, "operator", username="olivia")
    client_for(client, olivia)
    refused = client.post(PAGE, {"time_zone": "Mars/Olympus_Mons"})
    assert refused.status_code == 422
    assert "Select a valid choice" in refused.content.decode()
    assert not Preference.objects.filter(user=olivia).exists()
    assert not AuditEntry.objects.filter(verb="user.time_zone").exists()


def test_the_servers_zone_is_a_choice_too(client, tenant):
    olivia = make_user(tenant, "operator", username="olivia")
    client_for(client, olivia)
    client.post(PAGE, {"time_zone": "Asia/Tokyo"})
    client.post(PAGE, {"time_zone": ""})
    assert Preference.objects.get(user=olivia).time_zone == ""
    assert client.session[SESSION_KEY] == ""


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
