"""Headers on every response: a strict Content-Security-Policy and the browser protections."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from tests.factories import make_user

pytestmark = pytest.mark.django_db


def _directives(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


@pytest.fixture
def login_page(client):
    return client.get(reverse("login"))


def test_scripts_and_styles_come_only_from_our_origin(login_page):
    directives = _directives(login_page)

    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["base-uri"] == "'none'"
    assert directives["form-action"] == "'self'"


def test_nothing_unsafe_is_allowed(login_page):
    header = login_page["Content-Security-Policy"]

    for unsafe in ("unsafe-inline", "unsafe-eval", "unsafe-hashes", "*", "http:", "https:"):
        assert unsafe not in header.split(), unsafe
    assert "unsafe" not in header


def test_nobody_may_frame_a_page(login_page):
    assert _directives(login_page)["frame-ancestors"] == "'none'"
    assert login_page["X-Frame-Options"] == "DENY"


def test_the_browser_protections_are_on(login_page):
    assert login_page["X-Content-Type-Options"] == "nosniff"
    assert login_page["Referrer-Policy"] == "same-origin"
    assert login_page["Cross-Origin-Opener-Policy"] == "same-origin"


def test_the_admin_and_the_ledger_carry_the_policy(admin_client, client, tenant):
    client.force_login(make_user(tenant, "auditor"))
    for response in (admin_client.get(reverse("admin:index")), client.get("/receipts/")):
        assert response.status_code == 200
        assert _directives(response)["script-src"] == "'self'"


def test_cookies_cannot_be_read_by_scripts_or_sent_cross_site(client, tenant):
    make_user(tenant, "auditor", username="olga")
    client.get(reverse("login"))
    client.post(reverse("login"), {"username": "olga", "password": "a-long-test-password"})

    session, csrf = client.cookies["sessionid"], client.cookies["csrftoken"]
    assert session["httponly"]
    assert csrf["httponly"]
    assert session["samesite"] == csrf["samesite"] == "Lax"


# The policy forbids inline code; a template that has some breaks in the browser, silently.
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=[\"']application/json)", re.I)
EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=", re.I)
INLINE_STYLE = re.compile(r"<style\b|\sstyle\s*=", re.I)
SCRIPT_URL = re.compile(r"=\s*[\"']?\s*javascript:", re.I)
HX_ON = re.compile(r"\shx-on", re.I)


def _templates() -> list[Path]:
    roots = [Path(directory) for directory in settings.TEMPLATES[0]["DIRS"]]
    return sorted(path for root in roots for path in root.rglob("*.html"))


@pytest.mark.parametrize(
    "pattern",
    [INLINE_SCRIPT, EVENT_HANDLER, INLINE_STYLE, SCRIPT_URL, HX_ON],
    ids=["inline-script", "event-handler", "inline-style", "javascript-url", "hx-on"],
)
def test_no_template_holds_code_the_policy_would_block(pattern):
    templates = _templates()
    offenders = [str(path) for path in templates if pattern.search(path.read_text())]

    assert templates
    assert offenders == []
