"""The client package against a live server: real HTTP, a real token, real RQ workers.

The `workers`, `sandbox` and `redis_queue` fixtures come from tests/conftest.py. The
package lives in client/ and is not installed into the project's venv, so its
directory goes on sys.path here (test_install.py proves it installs on its own).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from control.services import api_token_create
from tests.factories import make_tenant

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))

from countersign_client import Countersign  # noqa: E402

LIVE = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


@pytest.fixture
def tenant(db):
    return make_tenant()


@pytest.fixture
def token(tenant) -> str:
    _, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    return token


@pytest.fixture
def cs(live_server, token) -> Countersign:
    return Countersign(live_server.url, token, timeout=10, retries=2, backoff=0.05)
