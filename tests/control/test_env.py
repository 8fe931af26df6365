"""Settings read the environment through typed readers that fail loudly on bad values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from control.foundation.env import (
    env_bool,
    env_database,
    env_int,
    env_list,
    env_signing_keys,
    env_str,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("on", True), ("No", False), ("", False)])
def test_booleans_accept_the_usual_spellings(monkeypatch, raw, value):
    monkeypatch.setenv("FLAG", raw)
    assert env_bool("FLAG") is value


def test_a_boolean_that_is_neither_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="FLAG must be one of"):
        env_bool("FLAG")


@pytest.mark.parametrize(("raw", "message"), [("ten", "integer"), ("0", "at least 1")])
def test_integers_are_checked_for_type_and_range(monkeypatch, raw, message):
    monkeypatch.setenv("COUNTERSIGN_LEASE_SECONDS", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        env_int("COUNTERSIGN_LEASE_SECONDS", 30, minimum=1)


def test_lists_and_required_strings(monkeypatch):
    monkeypatch.setenv("HOSTS", "a.example, b.example,")
    assert env_list("HOSTS", []) == ["a.example", "b.example"]
    monkeypatch.delenv("MISSING", raising=False)
    with pytest.raises(ImproperlyConfigured, match="MISSING must be set"):
        env_str("MISSING")


def test_database_urls_must_be_postgres_or_sqlite(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "mysql://db/countersign")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL must be"):
        env_database("DATABASE_URL", "sqlite:///x")
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/countersign")
    assert env_database("DATABASE_URL", "sqlite:///x")["NAME"] == "countersign"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("no-separator", "kid:secret"),
        ("k1:short", "must be 16"),
        ("k1:aaaaaaaaaaaaaaaa,k1:bbbbbbbbbbbbbbbb", "appears twice"),
        ("", "must be set"),
    ],
)
def test_checkpoint_keys_are_validated(monkeypatch, raw, message):
    monkeypatch.setenv("KEYS", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        env_signing_keys("KEYS", None)


def test_the_first_checkpoint_key_signs(monkeypatch):
    monkeypatch.setenv("KEYS", "new:bbbbbbbbbbbbbbbb,old:aaaaaaaaaaaaaaaa")
    assert list(env_signing_keys("KEYS", None)) == ["new", "old"]


def test_without_debug_a_missing_secret_key_stops_the_start():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "control.settings"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr
