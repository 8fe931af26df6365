"""Migration 0005 gives existing runs the count and digest the v2 worker would have chained:
the seeds' migration rule (test upgrade and rollback) against the real schema."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.record.verification import run_verify
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0004_action_needs_attention")]
AFTER = [("runs", "0005_completed_digest")]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.fixture
def latest_schema_after():
    """The test migrates back and forth; the next tests need every later migration again."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.usefixtures("latest_schema_after")
def test_existing_runs_get_the_digest_their_receipts_chain_to_and_still_verify():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    run = make_run(tenant)
    for number in (3, 1, 2):  # completion order differs from the ids' order
        action = make_action(run, action_id=f"close-{number}", target=f"ticket-{number}")
        approve(action, operator)
        execute_with_receipt(action, receipt_id=f"rcpt-{number}")
    untouched = make_run(tenant)
    run.refresh_from_db()
    chained = (run.completed_count, run.completed_digest)
    assert chained[0] == 3

    # Back to v1's schema, with the list v1 kept: the completed ids in completion order.
    old_apps = _migrate(BEFORE).loader.project_state(BEFORE).apps
    OldRun = old_apps.get_model("runs", "Run")
    OldRun.objects.filter(pk=run.pk).update(completed_work=["close-3", "close-1", "close-2"])
    _migrate(AFTER)

    run.refresh_from_db()
    untouched.refresh_from_db()
    assert (run.completed_count, run.completed_digest) == chained
    assert (untouched.completed_count, untouched.completed_digest) == (0, "sha256:" + "0" * 64)
    # Verified with today's code, which reads today's schema: the later migrations keep it.
    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert run_verify(run) == []
