"""Settings for a reachable server: control/settings.py plus everything that needs HTTPS.

Use with DJANGO_SETTINGS_MODULE=control.settings_production. It refuses to load with debug on,
a weak secret key, no explicit DJANGO_ALLOWED_HOSTS, a weak or demo checkpoint key, a switch
of the demo's and the tests' on (SANDBOX_ENABLED, SANDBOX_FAULTS, COUNTERSIGN_ALLOW_FAULT_POINTS),
or decision links that would travel in plain text (an http:// COUNTERSIGN_BASE_URL, SMTP to
another host without TLS) unless COUNTERSIGN_ALLOW_INSECURE_LINKS=1, so a misconfigured
deployment does not start rather than start insecure. `manage.py check --deploy` reports
nothing with it (tests/security/test_production_settings.py runs that).

Behind a reverse proxy that terminates TLS, set COUNTERSIGN_BEHIND_TLS_PROXY=1 (the proxy
must set X-Forwarded-Proto and strip it from clients) and COUNTERSIGN_TRUSTED_PROXY_COUNT.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from control.foundation import evidence_keys
from control.foundation.env import env_bool, env_int
from control.settings import *  # noqa: F403
from control.settings import (
    COUNTERSIGN_ALLOW_FAULT_POINTS,
    COUNTERSIGN_ALLOW_INSECURE_LINKS,
    COUNTERSIGN_BASE_URL,
    COUNTERSIGN_CHECKPOINT_KEYS,
    COUNTERSIGN_EVIDENCE_KEYS,
    DEBUG,
    MAILERS,
    SANDBOX_ENABLED,
    SANDBOX_FAULTS,
    SECRET_KEY,
)

if DEBUG:
    raise ImproperlyConfigured("control.settings_production refuses DJANGO_DEBUG=1")
# The same bar as Django's security.W009: long and not made of a few repeated characters.
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-"):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be 50+ random characters; make one with "
        'python3 -c "import secrets; print(secrets.token_urlsafe(50))"'
    )
if not os.environ.get("DJANGO_ALLOWED_HOSTS", "").strip():
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must name the hosts this server answers to")
for _kid, _secret in COUNTERSIGN_CHECKPOINT_KEYS.items():
    if len(_secret) < 32 or b"insecure" in _secret:
        raise ImproperlyConfigured(
            f"COUNTERSIGN_CHECKPOINT_KEYS: key {_kid!r} needs a random secret of 32+ characters "
            "(manage.py checkpoint_keys add --id NEW makes one)"
        )
if evidence_keys.DEMO_KEY_ID in COUNTERSIGN_EVIDENCE_KEYS or any(
    seed.decode() == evidence_keys.DEMO_SEED for seed in COUNTERSIGN_EVIDENCE_KEYS.values()
):
    raise ImproperlyConfigured(
        "COUNTERSIGN_EVIDENCE_KEYS holds the demo's key, whose private half is published: "
        "make a key of your own (docs/DEPLOY.md, Evidence keys)"
    )
for _kid, _seed in COUNTERSIGN_EVIDENCE_KEYS.items():
    evidence_keys.private_key_from_seed("COUNTERSIGN_EVIDENCE_KEYS", _kid, _seed.decode())
# The demo's and the tests' switches: each opens a door a reachable server must keep shut.
for _name, _on, _door in (
    ("SANDBOX_ENABLED", SANDBOX_ENABLED, "serves the demo's fake systems at /sandbox/ unguarded"),
    ("SANDBOX_FAULTS", SANDBOX_FAULTS, "lets anyone inject faults into the sandbox"),
    (
        "COUNTERSIGN_ALLOW_FAULT_POINTS",
        COUNTERSIGN_ALLOW_FAULT_POINTS,
        "lets a worker SIGKILL itself at a named point",
    ),
):
    if _on:
        raise ImproperlyConfigured(
            f"control.settings_production refuses {_name} on: it {_door}, for the demo and "
            f"the tests only; unset {_name} or set it to 0"
        )

# A decision link decides for whoever holds it (with a link-only policy, no session needed):
# it must not cross a network in plain text, neither as the page it opens nor inside the mail.
# Plain SMTP to this host's own relay never leaves the machine on that hop, so it passes.
_MAIL = MAILERS["default"]["OPTIONS"]
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
for _name, _insecure, _why in (
    (
        "COUNTERSIGN_BASE_URL",
        not COUNTERSIGN_BASE_URL.lower().startswith("https://"),
        f"is {COUNTERSIGN_BASE_URL!r}: decision links and sessions would travel over plain "
        "HTTP; give the https:// address people open",
    ),
    (
        "COUNTERSIGN_EMAIL_USE_TLS",
        bool(_MAIL)
        and not (_MAIL["use_tls"] or _MAIL["use_ssl"])
        and _MAIL["host"].lower() not in _LOOPBACK,
        f"is off (and COUNTERSIGN_EMAIL_USE_SSL too) for the mail server {_MAIL.get('host')!r}: "
        "decision links would travel in plain text; set COUNTERSIGN_EMAIL_USE_TLS=1 "
        "(STARTTLS) or COUNTERSIGN_EMAIL_USE_SSL=1",
    ),
):
    if _insecure and not COUNTERSIGN_ALLOW_INSECURE_LINKS:
        raise ImproperlyConfigured(
            f"control.settings_production refuses: {_name} {_why} "
            "(or accept the risk with COUNTERSIGN_ALLOW_INSECURE_LINKS=1)"
        )

# HTTPS only: redirect plain HTTP, and tell browsers never to try it again.
SECURE_SSL_REDIRECT = True
# Load balancers and orchestrators probe health over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("COUNTERSIGN_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("COUNTERSIGN_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("COUNTERSIGN_HSTS_PRELOAD", default=True)
if env_bool("COUNTERSIGN_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Cookies travel only over HTTPS; the __Host- prefix also forbids a Domain attribute, so a
# sibling subdomain cannot plant or overwrite them.
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_NAME = "__Host-sessionid"
CSRF_COOKIE_NAME = "__Host-csrftoken"

# Static files are served by the app itself: WhiteNoiseMiddleware right after SecurityMiddleware
# (so the HTTPS redirect and its headers still come first, and nothing after it needs a session
# or a database for them), under content-hashed names that browsers cache for years, with
# gzipped copies beside them; the image's `collectstatic` writes them and their manifest.
# Development and the tests keep Django's defaults: runserver and live_server serve them.
_AFTER_SECURITY = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1  # noqa: F405
MIDDLEWARE = [
    *MIDDLEWARE[:_AFTER_SECURITY],  # noqa: F405
    "whitenoise.middleware.WhiteNoiseMiddleware",
    *MIDDLEWARE[_AFTER_SECURITY:],  # noqa: F405
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
