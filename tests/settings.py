"""Test settings: PostgreSQL for both databases, fast hashing, fault points allowed."""

from __future__ import annotations

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/countersign")
os.environ.setdefault(
    "SANDBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/countersign_sandbox"
)
os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault(
    "COUNTERSIGN_CHECKPOINT_KEYS",
    "test-2:second-test-checkpoint-key,test-1:first-test-checkpoint-key",
)
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")

from control.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
COUNTERSIGN_ALLOW_FAULT_POINTS = True
SANDBOX_FAULTS = True
