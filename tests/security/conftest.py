"""Fixtures for the security tests: people in tenants, and evidence reached through services."""

from __future__ import annotations

import pytest

from tests.factories import make_tenant, make_user

PASSWORD = "a-long-test-password"


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
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password=PASSWORD)


@pytest.fixture
def staff_auditor(tenant):
    """A tenant's auditor with staff status: the admin shows them their tenant's evidence."""
    person = make_user(tenant, "auditor", username="aude")
    person.is_staff = True
    person.save(update_fields=["is_staff"])
    return person
