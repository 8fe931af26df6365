"""Events and receipts are insert-only in the database itself, not only in the ORM.

A trigger refuses every UPDATE and DELETE of a row of runs_runevent and runs_receipt, so an
application bug or a stray script cannot rewrite history; what a database owner might still do
(disable the trigger) the hash chains and the checkpoint MAC detect. TRUNCATE, which only the
test suite uses to start from empty tables, fires no row trigger.
"""

from __future__ import annotations

from django.db import migrations

TABLES = ("runs_runevent", "runs_receipt")

POSTGRESQL_FUNCTION = """
CREATE OR REPLACE FUNCTION countersign_insert_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is insert-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def _install(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_FUNCTION, params=None)
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(
                f"CREATE TRIGGER {table}_insert_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION countersign_insert_only()"
            )
        elif vendor == "sqlite":
            for operation in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is insert-only: {operation} refused'); END"
                )


def _remove(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_insert_only ON {table}")
        elif vendor == "sqlite":
            for operation in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{operation}")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS countersign_insert_only()")


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(_install, _remove)]
