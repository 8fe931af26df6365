"""Countersign settings, read from the environment (see .env.example)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from control.foundation import evidence_keys
from control.foundation.env import (
    env_bool,
    env_choice,
    env_database,
    env_int,
    env_list,
    env_signing_keys,
    env_str,
)
from runs.notify import signing as webhook

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", default="" if not DEBUG else "insecure-debug-only-key")
if not SECRET_KEY:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off")
# Old keys still accepted for existing sessions while a rotation settles (SECURITY.md).
SECRET_KEY_FALLBACKS = env_list("DJANGO_SECRET_KEY_FALLBACKS", [])
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_rq",
    # Serves the API docs' assets from our static files (the CSP allows no CDN).
    "ninja",
    "control",
    "runs",
    "reconciliation",
    "sandbox",
    # Benchmarks, volume seeding and the soak: commands only; no product code imports it.
    "bench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "control.web.zones.TimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, so it sees the PermissionDenied of every view (and of its decorators).
    "control.auth.denials.AuditDeniedMiddleware",
]

ROOT_URLCONF = "control.urls"
WSGI_APPLICATION = "control.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # `shown`, `shown_json`, `lookalike_flags`: every page shows an agent's targets
            # and arguments through them (runs/pages/lookalikes.py).
            "builtins": ["runs.templatetags.agent_text", "control.templatetags.moments"],
        },
    },
]

# PostgreSQL is the truth; SQLite is only the demo's default when nothing is configured.
DATABASES = {
    "default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'countersign.sqlite3'}"),
    "sandbox": env_database("SANDBOX_DATABASE_URL", f"sqlite:///{VAR_DIR / 'sandbox.sqlite3'}"),
}
DATABASE_ROUTERS = ["sandbox.routers.SandboxRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# --- Security: authentication, sessions, cookies, headers (see SECURITY.md) ---------------
# settings_production.py adds what needs HTTPS: secure cookies, HSTS, the SSL redirect.

# Every authenticate() refuses while the username or the address is locked (control.auth.login).
# Sessions store this path: control/auth/__init__.py keeps it (it names control.auth.login's).
AUTHENTICATION_BACKENDS = ["control.auth.ThrottledModelBackend"]
COUNTERSIGN_LOGIN_MAX_FAILURES = env_int("COUNTERSIGN_LOGIN_MAX_FAILURES", 5, minimum=1)
# Higher than per username: many people may share one address behind a NAT.
COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int(
    "COUNTERSIGN_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1
)
COUNTERSIGN_LOGIN_WINDOW_SECONDS = env_int("COUNTERSIGN_LOGIN_WINDOW_SECONDS", 15 * 60, minimum=1)
COUNTERSIGN_LOGIN_LOCK_SECONDS = env_int("COUNTERSIGN_LOGIN_LOCK_SECONDS", 15 * 60, minimum=1)
# How many reverse proxies in front of Countersign append to X-Forwarded-For; 0 trusts none
# and uses REMOTE_ADDR. Too high lets a client pick the address its failures count against.
COUNTERSIGN_TRUSTED_PROXY_COUNT = env_int("COUNTERSIGN_TRUSTED_PROXY_COUNT", 0)

# A session grants approvals: it ends after a working day, and logout deletes it server-side.
SESSION_COOKIE_AGE = env_int("COUNTERSIGN_SESSION_SECONDS", 12 * 3600, minimum=60)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# Pages send the token from the form or `hx-headers`; no script needs to read the cookie.
CSRF_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
CSRF_FAILURE_VIEW = "control.auth.denials.csrf_failure"

# Scripts and styles only from our own static files: no inline script, no inline style, no
# eval (htmx's hx-on and its injected indicator styles are off), and nobody may frame us.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

REDIS_URL = env_str("REDIS_URL", default="redis://127.0.0.1:6379/0")
RQ_QUEUES = {
    "countersign": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 300},
}
RQ_EXECUTION_QUEUE = "countersign"
# django-rq's pages live only at /django-rq/, behind the superuser gate (control/web/dashboard.py);
# inside the admin they would be another door open to every staff user.
RQ_SHOW_ADMIN_LINK = False

# Agent API limits per token, counted in Redis across every web process (control.api_kit.limits).
COUNTERSIGN_API_RATE_PER_MINUTE = env_int("COUNTERSIGN_API_RATE_PER_MINUTE", 600, minimum=1)
# Each waiting long-poll holds a web worker thread for up to 30 s.
COUNTERSIGN_API_MAX_LONG_POLLS = env_int("COUNTERSIGN_API_MAX_LONG_POLLS", 4, minimum=1)
# Long-polls waiting at once in one web process, whatever their tokens: the rest of its
# threads stay free for other requests (gunicorn_config's GUNICORN_THREADS, default 8: keep
# this below it).
COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS = env_int(
    "COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS", 6, minimum=1
)
# Requests and plans of one token waiting for people at once (runs.limits.waiting_cap_check).
COUNTERSIGN_API_MAX_WAITING_REQUESTS = env_int(
    "COUNTERSIGN_API_MAX_WAITING_REQUESTS", 1000, minimum=1
)
COUNTERSIGN_API_MAX_WAITING_PLANS = env_int("COUNTERSIGN_API_MAX_WAITING_PLANS", 100, minimum=1)

# Checkpoint MAC keys: `kid:secret,...`; the first signs, every listed key verifies.
COUNTERSIGN_CHECKPOINT_KEYS = env_signing_keys(
    "COUNTERSIGN_CHECKPOINT_KEYS",
    default="demo-1:insecure-demo-checkpoint-key" if DEBUG else None,
)
# Evidence keys (Ed25519, control.foundation.evidence_keys): `kid:seed,...` with 32-byte
# base64url seeds; the first signs decision receipts, every listed key's public half is
# published at /.well-known/countersign-keys.json.
COUNTERSIGN_EVIDENCE_KEYS = env_signing_keys(
    "COUNTERSIGN_EVIDENCE_KEYS",
    default=f"{evidence_keys.DEMO_KEY_ID}:{evidence_keys.DEMO_SEED}" if DEBUG else None,
)
COUNTERSIGN_LEASE_SECONDS = env_int("COUNTERSIGN_LEASE_SECONDS", 30, minimum=1)
COUNTERSIGN_APPROVAL_SECONDS = env_int("COUNTERSIGN_APPROVAL_SECONDS", 24 * 3600, minimum=1)
# An MCP session's run that no call reached for this long is ended by the sweep (completed
# with its receipts, else cancelled as idle); a run holding an open write is never ended.
COUNTERSIGN_MCP_IDLE_SECONDS = env_int("COUNTERSIGN_MCP_IDLE_SECONDS", 3600, minimum=60)

# Email (approval requested / about to expire / expired) and the optional signed webhook.
_EMAIL_BACKEND = env_str(
    "COUNTERSIGN_EMAIL_BACKEND",
    default="django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
MAILERS = {
    "default": {
        "BACKEND": _EMAIL_BACKEND,
        "OPTIONS": {
            "host": env_str("COUNTERSIGN_EMAIL_HOST", default="localhost"),
            "port": env_int("COUNTERSIGN_EMAIL_PORT", 25, minimum=1),
            # STARTTLS on a submission port (587), or TLS from the first byte (465).
            "use_tls": env_bool("COUNTERSIGN_EMAIL_USE_TLS", default=False),
            "use_ssl": env_bool("COUNTERSIGN_EMAIL_USE_SSL", default=False),
        }
        if _EMAIL_BACKEND.endswith("smtp.EmailBackend")
        else {},
    }
}
DEFAULT_FROM_EMAIL = env_str("COUNTERSIGN_NOTIFY_FROM", default="countersign@localhost")
COUNTERSIGN_NOTIFY_FROM = DEFAULT_FROM_EMAIL
COUNTERSIGN_BASE_URL = env_str("COUNTERSIGN_BASE_URL", default="http://localhost:8000")
# A decision link decides for whoever reads it on the way: control.settings_production refuses
# an http:// base URL or mail sent in plain text to another host, unless this says so.
COUNTERSIGN_ALLOW_INSECURE_LINKS = env_bool("COUNTERSIGN_ALLOW_INSECURE_LINKS", default=False)
COUNTERSIGN_NOTIFY_WEBHOOK_URL = env_str("COUNTERSIGN_NOTIFY_WEBHOOK_URL", default="")
COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = env_str("COUNTERSIGN_NOTIFY_WEBHOOK_SECRET", default="")
# standard: Standard Webhooks signatures over CloudEvents (a whsec_ secret); countersign-v1:
# the deprecated format of earlier releases, kept for this one (runs.notify.signing).
COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT = env_choice(
    "COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT", webhook.FORMATS, default=webhook.STANDARD
)
if COUNTERSIGN_NOTIFY_WEBHOOK_URL:
    if not COUNTERSIGN_NOTIFY_WEBHOOK_SECRET:
        raise ImproperlyConfigured(
            "COUNTERSIGN_NOTIFY_WEBHOOK_URL is set without COUNTERSIGN_NOTIFY_WEBHOOK_SECRET:"
            " the webhook is signed, never sent unsigned"
        )
    if COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT == webhook.STANDARD:
        webhook.standard_key(COUNTERSIGN_NOTIFY_WEBHOOK_SECRET)
# A waiting request this close to its expiry gets an "about to expire" notification.
COUNTERSIGN_APPROVAL_WARNING_SECONDS = env_int(
    "COUNTERSIGN_APPROVAL_WARNING_SECONDS", 3600, minimum=1
)
# How long the decision link in an "approval requested" mail works (never past the request's
# own expiry): runs.decision_links.
COUNTERSIGN_DECISION_LINK_SECONDS = env_int("COUNTERSIGN_DECISION_LINK_SECONDS", 1800, minimum=1)

# /metrics: `Authorization: Bearer <token>` or a client inside these CIDRs; neither set: 404.
COUNTERSIGN_METRICS_TOKEN = env_str("COUNTERSIGN_METRICS_TOKEN", default="")
COUNTERSIGN_METRICS_NETWORKS = env_list("COUNTERSIGN_METRICS_NETWORKS", [])

# The sandbox is the demo's fake external systems (ticket desk, notifier, payments), with no
# login and no CSRF. Off, /sandbox/ is not mounted and its tools are not registered; the demo
# and the tests turn it on, control.settings_production refuses it.
SANDBOX_ENABLED = env_bool("SANDBOX_ENABLED", default=False)
# Where the sandbox's external systems answer; Countersign reaches them only over HTTP.
SANDBOX_URL = env_str("COUNTERSIGN_SANDBOX_URL", default="http://127.0.0.1:8000/sandbox/")
SANDBOX_FAULTS = env_bool("SANDBOX_FAULTS", default=False)
# The connector files (TOML) that define the tools workers may call: docs/CONNECTORS.md.
COUNTERSIGN_CONNECTORS = env_list("COUNTERSIGN_CONNECTORS", [])
# The demo's sandbox tools, loaded while SANDBOX_ENABLED is on.
COUNTERSIGN_DEMO_CONNECTORS = str(BASE_DIR / "connectors" / "demo.toml")

# Crash tests name a point where the worker SIGKILLs itself; honoured only when allowed.
COUNTERSIGN_ALLOW_FAULT_POINTS = env_bool("COUNTERSIGN_ALLOW_FAULT_POINTS", default=False)
COUNTERSIGN_FAULT_POINT = env_str("COUNTERSIGN_FAULT_POINT", default="")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # A decision link's token decides for whoever reads it: no log line carries one.
    "filters": {"decision_tokens": {"()": "control.foundation.log_redaction.DecisionTokenFilter"}},
    # runserver's request lines (the demo's web server) as Django's default logging writes
    # them, through the same filter.
    "formatters": {
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        }
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["decision_tokens"]},
        "django.server": {
            "class": "logging.StreamHandler",
            "formatter": "django.server",
            "filters": ["decision_tokens"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("COUNTERSIGN_LOG_LEVEL", "INFO")},
    "loggers": {
        # The MCP SDK says at INFO that it starts and stops each request's handler.
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False},
    },
}
