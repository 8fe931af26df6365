"""control.settings_production passes `check --deploy` and refuses to start misconfigured."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from control.foundation.evidence_keys import DEMO_SEED, b64url

ROOT = Path(__file__).resolve().parents[2]


def _manage(tmp_path, *args: str, settings: str = "control.settings_production", **env: str):
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "COUNTERSIGN_", "SANDBOX_"))
    }
    environment.update(
        {
            "DJANGO_SETTINGS_MODULE": settings,
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "COUNTERSIGN_CHECKPOINT_KEYS": "k1:" + secrets.token_urlsafe(32),
            "COUNTERSIGN_EVIDENCE_KEYS": "e1:" + b64url(secrets.token_bytes(32)),
            "DJANGO_ALLOWED_HOSTS": "countersign.example.com",
            "COUNTERSIGN_BASE_URL": "https://countersign.example.com",
            "COUNTERSIGN_EMAIL_HOST": "smtp.example.com",
            "COUNTERSIGN_EMAIL_USE_TLS": "1",
            # `check` inspects the database's features; a file of our own keeps it hermetic.
            "DATABASE_URL": f"sqlite:///{tmp_path / 'check.sqlite3'}",
            "SANDBOX_DATABASE_URL": f"sqlite:///{tmp_path / 'sandbox.sqlite3'}",
        }
    )
    environment.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={key: value for key, value in environment.items() if value is not None},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_deploy_check_reports_nothing_with_production_settings(tmp_path):
    result = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_deploy_check_does_warn_with_the_development_settings(tmp_path):
    result = _manage(
        tmp_path, "check", "--deploy", "--fail-level", "WARNING", settings="control.settings"
    )

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_production_settings_name_the_cookies_for_https_only(tmp_path):
    script = (
        "from django.conf import settings as s;"
        "print(s.SESSION_COOKIE_NAME, s.CSRF_COOKIE_NAME, s.SESSION_COOKIE_SECURE,"
        " s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS,"
        " s.SECURE_REDIRECT_EXEMPT)"
    )

    result = _manage(tmp_path, "shell", "--no-imports", "-c", script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split(maxsplit=6) == [
        "__Host-sessionid",
        "__Host-csrftoken",
        "True",
        "True",
        "True",
        "31536000",
        "['^healthz$']\n",
    ]


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        ({"DJANGO_DEBUG": "1"}, "refuses DJANGO_DEBUG"),
        ({"DJANGO_SECRET_KEY": "short-but-set"}, "DJANGO_SECRET_KEY must be 50+"),
        ({"DJANGO_SECRET_KEY": "a" * 60}, "DJANGO_SECRET_KEY must be 50+"),
        ({"DJANGO_ALLOWED_HOSTS": None}, "DJANGO_ALLOWED_HOSTS must name"),
        ({"COUNTERSIGN_CHECKPOINT_KEYS": "k1:only-sixteen-chars"}, "needs a random secret"),
        (
            {"COUNTERSIGN_CHECKPOINT_KEYS": "demo-1:insecure-demo-checkpoint-key-padded-out"},
            "needs a random secret",
        ),
        ({"COUNTERSIGN_EVIDENCE_KEYS": None}, "COUNTERSIGN_EVIDENCE_KEYS must be set"),
        ({"COUNTERSIGN_EVIDENCE_KEYS": "e1:too-short-for-a-seed"}, "must be 32 random bytes"),
        (
            {"COUNTERSIGN_EVIDENCE_KEYS": f"mine:{DEMO_SEED}"},
            "holds the demo's key, whose private half is published",
        ),
        ({"SANDBOX_ENABLED": "1"}, "refuses SANDBOX_ENABLED on"),
        ({"SANDBOX_FAULTS": "true"}, "refuses SANDBOX_FAULTS on"),
        ({"COUNTERSIGN_ALLOW_FAULT_POINTS": "on"}, "refuses COUNTERSIGN_ALLOW_FAULT_POINTS on"),
    ],
    ids=[
        "debug",
        "short-key",
        "repetitive-key",
        "no-hosts",
        "short-mac-key",
        "demo-mac-key",
        "no-evidence-key",
        "short-evidence-key",
        "demo-evidence-key",
        "sandbox",
        "sandbox-faults",
        "fault-points",
    ],
)
def test_production_settings_refuse_to_load_misconfigured(tmp_path, env, refusal):
    result = _manage(tmp_path, "check", **env)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert refusal in result.stderr


def test_production_settings_serve_no_sandbox_and_register_none_of_its_tools(tmp_path):
    script = (
        "from django.urls import Resolver404, resolve\n"
        "from runs.tools.registry import all_tools\n"
        "try:\n"
        "    resolve('/sandbox/effects')\n"
        "    print('sandbox mounted')\n"
        "except Resolver404:\n"
        "    print('no sandbox')\n"
        "print(sorted(tool.name for tool in all_tools()))\n"
    )

    result = _manage(tmp_path, "shell", "--no-imports", "-c", script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["no sandbox", "[]"]


@pytest.mark.parametrize(
    ("base", "sandbox"),
    [("control.settings", "on"), ("control.settings_production", "refused")],
)
def test_bench_processes_turn_the_sandbox_on_only_where_the_base_settings_allow(
    tmp_path, base, sandbox
):
    script = (
        "from django.conf import settings\n"
        "from runs.tools.registry import get_tool\n"
        "print(settings.SANDBOX_ENABLED, get_tool('ticket.close').name)\n"
    )

    result = _manage(
        tmp_path,
        "shell",
        "--no-imports",
        "-c",
        script,
        settings="bench.settings",
        COUNTERSIGN_BENCH_BASE_SETTINGS=base,
        SANDBOX_ENABLED="0",
    )

    if sandbox == "on":
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["True", "ticket.close"]
    else:
        assert result.returncode != 0
        assert "refuses SANDBOX_ENABLED on" in result.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"COUNTERSIGN_BASE_URL": "http://countersign.example.com"}, "COUNTERSIGN_BASE_URL"),
        ({"COUNTERSIGN_BASE_URL": None}, "COUNTERSIGN_BASE_URL"),  # the default is http://
        ({"COUNTERSIGN_EMAIL_USE_TLS": None}, "COUNTERSIGN_EMAIL_USE_TLS"),
        ({"COUNTERSIGN_EMAIL_USE_TLS": "0"}, "COUNTERSIGN_EMAIL_USE_TLS"),
    ],
)
def test_production_settings_refuse_decision_links_in_plain_text(tmp_path, env, named):
    result = _manage(tmp_path, "check", **env)

    assert result.returncode != 0
    assert f"control.settings_production refuses: {named}" in result.stderr
    assert "COUNTERSIGN_ALLOW_INSECURE_LINKS=1" in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"COUNTERSIGN_EMAIL_USE_TLS": None, "COUNTERSIGN_EMAIL_USE_SSL": "1"},
        # Plain SMTP to this host's own relay never crosses a network on that hop.
        {"COUNTERSIGN_EMAIL_USE_TLS": None, "COUNTERSIGN_EMAIL_HOST": "localhost"},
        # Mail that never leaves through SMTP needs no TLS.
        {
            "COUNTERSIGN_EMAIL_USE_TLS": None,
            "COUNTERSIGN_EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend",
        },
        # Said out loud: accepted.
        {
            "COUNTERSIGN_BASE_URL": "http://countersign.internal",
            "COUNTERSIGN_EMAIL_USE_TLS": None,
            "COUNTERSIGN_ALLOW_INSECURE_LINKS": "1",
        },
    ],
)
def test_production_settings_accept_tls_loopback_no_smtp_or_an_explicit_allowance(tmp_path, env):
    result = _manage(tmp_path, "check", **env)

    assert result.returncode == 0, result.stderr
