"""The `connectors` system check: a worker or web server does not start with tools it cannot
trust. Django runs it before every management command that checks (rqworker, runserver,
migrate, check) and control/gunicorn_config.py runs it before gunicorn serves.

- every file in settings.COUNTERSIGN_CONNECTORS loads (a missing `${VAR}` names the variable;
  a bad field names the file, connector, tool and field);
- no tool is defined differently from the definition frozen at its contract version
  (runs.services.definitions), where the database can say.
"""

from __future__ import annotations

from django.core.checks import Error, register
from django.db import DatabaseError

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
