"""The `database_roles` system check: on PostgreSQL, warn while the application's role could
disable the insert-only triggers (it owns the tables, or is a superuser)."""

from __future__ import annotations

import uuid

import pytest
from django.core.checks import run_checks
from django.db import connection

pytestmark = pytest.mark.django_db

WARNING = "countersign.W001"


def _role_warnings() -> list:
    return [message for message in run_checks(tags=["database_roles"]) if message.id == WARNING]


@pytest.mark.postgresql  # roles are PostgreSQL's; SQLite has none
def test_the_check_warns_while_the_app_role_owns_the_insert_only_tables():
    # The test suite connects as `postgres`, which owns every table (and is a superuser).
    warnings = _role_warnings()

    assert sorted(warning.msg.split(" can alter ")[1].split(" ")[0] for warning in warnings) == [
        "runs_receipt",
        "runs_runevent",
        "runs_statement",
    ]
    assert "could disable the insert-only trigger" in warnings[0].msg
    assert "docs/DEPLOY.md" in warnings[0].hint


@pytest.mark.postgresql  # roles are PostgreSQL's; SQLite has none
def test_the_check_is_silent_for_a_role_with_only_dml():
    # A role of this test's own (inside its transaction, so rolled back with it), given only
    # what docs/DEPLOY.md grants the application, and taken on for the check.
    role = f"countersign_dml_{uuid.uuid4().hex[:12]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN NOSUPERUSER")
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        cursor.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        cursor.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cursor.execute(f"SET LOCAL ROLE {role}")
        try:
            assert _role_warnings() == []
        finally:
            cursor.execute("RESET ROLE")


@pytest.mark.postgresql  # roles are PostgreSQL's; SQLite has none
def test_a_member_of_the_owner_role_is_warned_too():
    # Owning through a group is owning: a member may ALTER TABLE ... DISABLE TRIGGER.
    role = f"countersign_member_{uuid.uuid4().hex[:12]}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        (owner,) = cursor.fetchone()
        cursor.execute(f"CREATE ROLE {role} NOLOGIN NOSUPERUSER IN ROLE {owner}")
        cursor.execute(f"SET LOCAL ROLE {role}")
        try:
            assert len(_role_warnings()) == 3
        finally:
            cursor.execute("RESET ROLE")
