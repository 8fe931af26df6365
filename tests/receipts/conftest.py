"""The ledger is read by auditors and admins of one tenant, through Django's test client."""

from __future__ import annotations

import pytest

from tests.factories import make_tenant, make_user


@pytest.fixture
def tenant():
    return make_tenant("acme")


@pytest.fixture
def other_tenant():
    return make_tenant("globex")


@pytest.fixture
def approver(tenant):
    return make_user(tenant, "operator", username="olivia")


@pytest.fixture
def auditor(tenant):
    return make_user(tenant, "auditor", username="aude")


@pytest.fixture
def auditor_client(client, auditor):
    client.force_login(auditor)
    return client
