"""Countersign settings, read from the environment (see .env.example)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from control.env import (
    env_bool,
    env_database,
    env_int,
    env_list,
    env_signing_keys,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", default="" if not DEBUG else "insecure-debug-only-key")
if not SECRET_KEY:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off")
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
    "control",
    "runs",
    "reconciliation",
    "sandbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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
LOGIN_REDIRECT_URL = "/inbox/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

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

# Checkpoint MAC keys: `kid:secret,...`; the first signs, every listed key verifies.
COUNTERSIGN_CHECKPOINT_KEYS = env_signing_keys(
    "COUNTERSIGN_CHECKPOINT_KEYS",
    default="demo-1:insecure-demo-checkpoint-key" if DEBUG else None,
)
COUNTERSIGN_LEASE_SECONDS = env_int("COUNTERSIGN_LEASE_SECONDS", 30, minimum=1)
COUNTERSIGN_APPROVAL_SECONDS = env_int("COUNTERSIGN_APPROVAL_SECONDS", 24 * 3600, minimum=1)

# Where the sandbox's external systems answer; Countersign reaches them only over HTTP.
SANDBOX_URL = env_str("COUNTERSIGN_SANDBOX_URL", default="http://127.0.0.1:8000/sandbox/")
SANDBOX_FAULTS = env_bool("SANDBOX_FAULTS", default=False)

# Crash tests name a point where the worker SIGKILLs itself; honoured only when allowed.
COUNTERSIGN_ALLOW_FAULT_POINTS = env_bool("COUNTERSIGN_ALLOW_FAULT_POINTS", default=False)
COUNTERSIGN_FAULT_POINT = env_str("COUNTERSIGN_FAULT_POINT", default="")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("COUNTERSIGN_LOG_LEVEL", "INFO")},
}
