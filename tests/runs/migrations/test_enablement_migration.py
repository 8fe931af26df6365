"""Migration 0022 keeps what existing tenants already used: each connector one of their
intents or tool policies names is enabled for them (reads as before), nothing else is, and
a tenant that used nothing reaches nothing."""

from __future__ import annotations

import pytest

from runs.selectors import connectors_enabled
from runs.services import tool_policy_set
from tests.factories import make_action, make_run, make_tenant
from tests.migrating import migrate_to

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0021_sign_existing_rows")]


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

    migrate_to(BEFORE)  # the table goes, with the factories' enablements
    migrate_to([("runs", "0022_connector_enablements")])

    assert connectors_enabled(tenant=used) == {"notify": True, "ticket": True}
    assert connectors_enabled(tenant=idle) == {}
