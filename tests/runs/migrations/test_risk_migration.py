"""Migration 0023 adds the risk tiers. An intent from before is rated high, and the intents'
table keeps its triggers on both databases (on SQLite, Django's AddField would have rebuilt
the table and dropped them); rolled back, the column goes away and the triggers stay."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.models import Action, Risk
from tests.factories import make_action, make_run, make_tenant
from tests.migrating import migrate_to

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0022_connector_enablements")]
AFTER = [("runs", "0023_risk_tiers")]


def triggers_on_actions() -> set[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'runs_action'::regclass "
                "AND NOT tgisinternal"
            )
        else:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'runs_action'"
            )
        return {name for (name,) in cursor.fetchall()}


def action_columns() -> set[str]:
    with connection.cursor() as cursor:
        return {
            column.name
            for column in connection.introspection.get_table_description(cursor, "runs_action")
        }


@pytest.mark.usefixtures("latest_schema_after")
def test_the_tier_column_comes_and_goes_and_the_intents_triggers_stay():
    action = make_action(
        make_run(make_tenant()), tool="notify.send", target="a@example.com", args={"body": "hi"}
    )
    assert action.risk == Risk.IRREVERSIBLE
    triggers = triggers_on_actions()
    assert triggers  # the metrics counts (runs 0013)

    migrate_to(BEFORE)
    assert "risk" not in action_columns()
    assert triggers_on_actions() == triggers

    migrate_to(AFTER)
    assert triggers_on_actions() == triggers
    assert Action.objects.get(pk=action.pk).risk == Risk.HIGH  # from before: the middle tier
