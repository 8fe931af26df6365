"""The `connectors` system check: a worker or web server does not start with tools it cannot
trust. Django runs it before every management command that checks (rqworker, runserver,
migrate, check) and control/gunicorn_config.py runs it before gunicorn serves.

- every file in settings.COUNTERSIGN_CONNECTORS loads (a missing `${VAR}` names the variable;
  a bad field names the file, connector, tool and field);
- no tool is defined differently from the definition frozen at its contract version
  (runs.services.definitions), where the database can say.

And the `database_roles` check (a warning, countersign.W001): on PostgreSQL, the role the
application connects as must not own the insert-only tables (events, receipts), nor be a
superuser: an owner can disable the trigger that refuses their UPDATE and DELETE, so history
would then rest on the hash chains alone. docs/DEPLOY.md says how to split the roles.
"""

from __future__ import annotations

from django.core.checks import Error, register
from django.core.checks import Warning as RoleWarning
from django.db import DatabaseError, connection

from runs.models import Receipt, RunEvent, Statement
from runs.services.definitions import tool_definitions_changed
from runs.tools.connectors.fields import ConnectorError
from runs.tools.registry import all_tools


@register("connectors")
def connectors_check(app_configs, **kwargs) -> list[Error]:
    try:
        tools = all_tools()
    except ConnectorError as error:
        return [Error(str(error), id="countersign.E101")]
    try:
        changed = tool_definitions_changed(tools)
    except DatabaseError:
        # Before the first migrate, or without a database: nothing frozen can be compared.
        # A proposal still refuses a changed definition (tool_definition_confirm).
        return []
    return [Error(problem, id="countersign.E102") for problem in changed]


# Tables of `tables` the connected role could alter (disable a trigger, drop it): those it
# owns, directly or through a role it belongs to, and all of them for a superuser.
ALTERABLE_TABLES = """
SELECT c.relname, pg_get_userbyid(c.relowner)
FROM pg_class c
WHERE c.oid IN (SELECT to_regclass(name) FROM unnest(%s::text[]) AS name)
  AND (pg_has_role(current_user, c.relowner, 'MEMBER')
       OR EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND rolsuper))
ORDER BY c.relname
"""


@register("database_roles")
def insert_only_owner_check(app_configs, **kwargs) -> list[RoleWarning]:
    if connection.vendor != "postgresql":
        return []  # SQLite has no roles: the demo's file is anyone's who can write it
    tables = [RunEvent._meta.db_table, Receipt._meta.db_table, Statement._meta.db_table]
    try:
        with connection.cursor() as cursor:
            cursor.execute(ALTERABLE_TABLES, [tables])
            alterable = cursor.fetchall()
            cursor.execute("SELECT current_user")
            (role,) = cursor.fetchone()
    except DatabaseError:
        return []  # no database yet: nothing to say about its roles
    return [
        RoleWarning(
            f"the application's database role {role!r} can alter {table} (owned by {owner!r}): "
            "it could disable the insert-only trigger that refuses edits of history",
            hint="create the schema with an owner role (migrate as it) and run the app with a "
            "role that has only SELECT, INSERT, UPDATE, DELETE: docs/DEPLOY.md, "
            '"Database roles"',
            id="countersign.W001",
        )
        for table, owner in alterable
    ]
