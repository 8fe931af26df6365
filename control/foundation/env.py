"""Typed readers for settings that come from the environment.

Each reader fails loudly with ImproperlyConfigured naming the variable and the
rule it broke, so a typo in a deployment never turns into a silent default.
"""

from __future__ import annotations

import os

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of 1/0, true/false, yes/no, on/off; got {value!r}"
    )


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {number}")
    return number


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_database(name: str, default_url: str) -> dj_database_url.DBConfig:
    url = os.environ.get(name, default_url)
    if not url.startswith(("postgres://", "postgresql://", "sqlite:///")):
        raise ImproperlyConfigured(
            f"{name} must be a postgres://, postgresql:// or sqlite:/// URL; got {url!r}"
        )
    config = dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
    if url.startswith("sqlite"):
        # The demo's web, worker and sweeper share the file: wait for locks, don't fail.
        config["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    return config


def env_signing_keys(name: str, default: str | None) -> dict[str, bytes]:
    """Parse `kid:secret,kid:secret`; insertion order is kept, the first key signs."""
    raw = os.environ.get(name, default)
    if not raw:
        raise ImproperlyConfigured(f"{name} must be set to kid:secret[,kid:secret...]")
    keys: dict[str, bytes] = {}
    for item in raw.split(","):
        kid, separator, secret = item.strip().partition(":")
        if not separator or not kid or not secret:
            raise ImproperlyConfigured(f"{name}: each entry must be kid:secret; got {item!r}")
        if kid in keys:
            raise ImproperlyConfigured(f"{name}: key id {kid!r} appears twice")
        if len(secret) < 16:
            raise ImproperlyConfigured(f"{name}: secret of key {kid!r} must be 16+ characters")
        keys[kid] = secret.encode()
    return keys
