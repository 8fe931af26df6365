"""Migration 0022 keeps what existing tenants already used: each connector one of their
intents or tool policies names is enabled for them (reads as before), nothing else is, and
a tenant that used nothing reaches nothing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.selectors import connectors_enabled
from runs.services import tool_policy_set
from tests.factories import make_action, make_run, make_tenant

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0021_sign_existing_rows")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.fixture
def latest_schema_after():
    """The test migrates back and forth; the next tests need every later migration again."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.usefixtures("latest_schema_after")
def test_existing_tenants_keep_the_connectors_they_used_and_nothing_more():
    used = make_tenant()
    make_action(make_run(used))  # ticket.close
    tool_policy_set(
        tenant=used,
        tool="notify.send",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=600,
        actor="tests",
    )
    idle = make_tenant()

    _migrate(BEFORE)  # the table goes, with the factories' enablements
    _migrate([("runs", "0022_connector_enablements")])

    assert connectors_enabled(tenant=used) == {"notify": True, "ticket": True}
    assert connectors_enabled(tenant=idle) == {}
