"""CSRF: every form carries a token, and a post without one or from another origin is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from control.models import AuditEntry
from tests.factories import make_user
from tests.security.conftest import PASSWORD

pytestmark = pytest.mark.django_db
HOST = "testserver"
FOREIGN = "https://evil.example"
POST_FORM = re.compile(r"<form\b[^>]*\bmethod=[\"']?post[\"']?[^>]*>(.*?)</form>", re.I | re.S)


def _token(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200
    return response.cookies["csrftoken"].value


@pytest.fixture
def person(tenant):
    return make_user(tenant, "auditor", username="olga")


@pytest.fixture
def guarded():
    return Client(enforce_csrf_checks=True)


def test_the_login_form_without_a_token_is_refused(guarded, person):
    response = guarded.post(reverse("login"), {"username": "olga", "password": PASSWORD})

    assert response.status_code == 403
    assert "_auth_user_id" not in guarded.session


def test_the_login_form_from_a_foreign_origin_is_refused_even_with_a_token(guarded, person):
    token = _token(guarded, reverse("login"))

    response = guarded.post(
        reverse("login"),
        {"username": "olga", "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Origin": FOREIGN},
    )

    assert response.status_code == 403


def test_the_login_form_from_our_origin_with_its_token_logs_in(guarded, person):
    token = _token(guarded, reverse("login"))

    response = guarded.post(
        reverse("login"),
        {"username": "olga", "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Origin": f"http://{HOST}"},
    )

    assert response.status_code == 302


@pytest.fixture
def guarded_admin(guarded, superuser):
    guarded.force_login(superuser)
    return guarded


def test_an_admin_post_without_a_token_is_refused(guarded_admin):
    response = guarded_admin.post(reverse("admin:logout"))

    assert response.status_code == 403
    assert guarded_admin.get(reverse("admin:index")).status_code == 200


def test_an_admin_post_from_a_foreign_origin_is_refused_even_with_a_token(guarded_admin):
    token = _token(guarded_admin, reverse("admin:index"))

    response = guarded_admin.post(
        reverse("admin:logout"), {"csrfmiddlewaretoken": token}, headers={"Origin": FOREIGN}
    )

    assert response.status_code == 403
    assert guarded_admin.get(reverse("admin:index")).status_code == 200


def test_an_admin_post_from_our_origin_with_its_token_goes_through(guarded_admin):
    token = _token(guarded_admin, reverse("admin:index"))

    response = guarded_admin.post(
        reverse("admin:logout"),
        {"csrfmiddlewaretoken": token},
        headers={"Origin": f"http://{HOST}"},
    )

    assert response.status_code == 302
    assert guarded_admin.get(reverse("admin:index")).status_code == 302


def test_a_forged_post_in_a_logged_in_session_is_audited(guarded, person):
    guarded.force_login(person)

    guarded.post(reverse("logout"), headers={"Origin": FOREIGN})

    denial = AuditEntry.objects.get(verb="auth.denied")
    assert denial.actor == "olga"
    assert denial.reason.startswith("CSRF check failed")


def test_an_anonymous_csrf_refusal_is_not_audited(guarded):
    guarded.post(reverse("login"), {"username": "x", "password": "y"})

    assert not AuditEntry.objects.filter(verb="auth.denied").exists()


def _templates() -> list[Path]:
    roots = [Path(directory) for directory in settings.TEMPLATES[0]["DIRS"]]
    return sorted(path for root in roots for path in root.rglob("*.html"))


def test_every_post_form_in_our_templates_carries_the_csrf_token():
    forms = 0
    for path in _templates():
        for body in POST_FORM.findall(path.read_text()):
            forms += 1
            assert "{% csrf_token %}" in body, path
    assert forms >= 1


def test_htmx_requests_send_the_csrf_token_from_the_page():
    base = (Path(settings.TEMPLATES[0]["DIRS"][0]) / "base.html").read_text()

    assert re.search(r"<body[^>]*hx-headers='\{\"X-CSRFToken\": \"\{\{ csrf_token \}\}\"\}'", base)
