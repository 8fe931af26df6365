"""Test settings: PostgreSQL for both databases, fast hashing, the sandbox on, faults allowed.

Each pytest process gets its own test databases and its own Redis database (claimed in
tests/redis_database.py), so concurrent runs on one machine never collide. Worker
subprocesses get explicit URLs from the tests.
"""

from __future__ import annotations

import os

_suffix = os.environ.get("COUNTERSIGN_TEST_DB_SUFFIX", str(os.getpid()))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/countersign")
os.environ.setdefault(
    "SANDBOX_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/countersign_sandbox"
)
os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault(
    "COUNTERSIGN_CHECKPOINT_KEYS",
    "test-2:second-test-checkpoint-key,test-1:first-test-checkpoint-key",
)
os.environ.setdefault(
    "COUNTERSIGN_EVIDENCE_KEYS",
    "test-ed-2:dGVzdC1ldmlkZW5jZS1rZXktdHdvLS0tLS0tLS0tLS0,"
    "test-ed-1:dGVzdC1ldmlkZW5jZS1rZXktb25lLS0tLS0tLS0tLS0",
)
if "REDIS_URL" not in os.environ:
    # The processes a test starts are given the URL; the suite's own process claims one.
    from tests.redis_database import claim_redis_database

    os.environ["REDIS_URL"] = f"redis://127.0.0.1:6379/{claim_redis_database()}"

from control.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
COUNTERSIGN_ALLOW_FAULT_POINTS = True
# The tests' tools are the sandbox's; tests/security/test_sandbox_switch.py turns it off.
SANDBOX_ENABLED = True
SANDBOX_FAULTS = True

for _alias, _name in (("default", "countersign"), ("sandbox", "countersign_sandbox")):
    DATABASES[_alias]["TEST"] = {"NAME": f"test_{_name}_{_suffix}"}  # noqa: F405
    # live_server answers from many threads: each closes its connection after the request
    # instead of keeping it, or a parallel test exhausts PostgreSQL's connection slots.
    DATABASES[_alias]["CONN_MAX_AGE"] = 0  # noqa: F405
# The sandbox stands alone: a test that asks only for it must not pull "default" in.
DATABASES["sandbox"]["TEST"]["DEPENDENCIES"] = []  # noqa: F405
