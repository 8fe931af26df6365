"""A tool's meaning is frozen per contract version.

The first intent frozen for a tool at a contract version stores the tool's definition and its
digest (Tool.definition, Tool.definition_digest: what it calls, with what, and what it
promises; not its URLs, credentials or retry limits). From then on that (tool, version) must
mean the same: a changed definition under the same key is how one intent becomes two
different effects. Proposals for it are refused (DefinitionChanged), and the `connectors`
system check (runs/checks.py) refuses to start a worker or a web server with it. Bumping the
contract version is the way to change a tool.

Each process confirms a (tool, version, digest) once and remembers it.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from runs.exceptions import DefinitionChanged
from runs.models import ToolDefinition
from runs.tools.base import Tool

_CONFIRMED: set[tuple[str, str, str]] = set()


def _changed(tool: Tool, stored: str, current: str) -> str:
    return (
        f"{tool.name} {tool.contract_version} is defined differently from when it was first "
        f"used (stored {stored}, now {current}): a changed tool needs a new contract_version"
    )


def tool_definition_confirm(*, tool: Tool) -> None:
    """Freeze tool's definition if it is the first use, else refuse a changed one."""
    digest = tool.definition_digest()
    if (tool.name, tool.contract_version, digest) in _CONFIRMED:
        return
    with transaction.atomic():
        stored, _ = ToolDefinition.objects.get_or_create(
            tool=tool.name,
            contract_version=tool.contract_version,
            defaults={"digest": digest, "definition": tool.definition()},
        )
    if stored.digest != digest:
        raise DefinitionChanged(_changed(tool, stored.digest, digest))
    _CONFIRMED.add((tool.name, tool.contract_version, digest))


def tool_definitions_changed(tools: Iterable[Tool]) -> list[str]:
    """One message per tool whose frozen definition differs from its definition now."""
    tools = list(tools)
    stored = {
        (row.tool, row.contract_version): row.digest
        for row in ToolDefinition.objects.filter(tool__in={tool.name for tool in tools})
    }
    problems = []
    for tool in tools:
        frozen = stored.get((tool.name, tool.contract_version))
        if frozen is not None and frozen != tool.definition_digest():
            problems.append(_changed(tool, frozen, tool.definition_digest()))
    return problems


def forget_confirmed_definitions() -> None:
    """Tests roll the table back between them; the process must ask again."""
    _CONFIRMED.clear()
