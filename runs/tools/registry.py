"""Every tool Countersign knows, by name and contract version.

Three sources, looked up together:
- the connector files settings.COUNTERSIGN_CONNECTORS names (docs/CONNECTORS.md), loaded once
  per process; a file that cannot be loaded (a missing `${VAR}`, a bad schema) raises
  ConnectorError naming the file, connector, tool and field. The `connectors` system check
  (runs/checks.py) loads them when a command or the web server starts, so a broken file
  stops the start.
- the demo's connectors/demo.toml (ticket.*, notify.send, payment.*: `http` tools of the
  sandbox) while settings.SANDBOX_ENABLED is on, with `${COUNTERSIGN_SANDBOX_URL}` taken from
  settings.SANDBOX_URL (tests point it at live_server). Both settings are read at every
  lookup; control.settings_production refuses the sandbox. Off, its tools are unknown like
  any other name: a proposal for one is a 422 naming it, a worker fails an action for one
  closed (`unsupported_tool`).
- tools registered with register_tool: a test's own tools. One registered under a name and
  version a file defines wins.
"""

from __future__ import annotations

import functools
import os

from django.conf import settings

from control.foundation.redaction import redact
from runs.tools.base import Tool
from runs.tools.connectors.files import load_files
from runs.tools.errors import UnsupportedTool

_REGISTERED: dict[tuple[str, str], Tool] = {}


def _keyed(tools: list[Tool]) -> dict[tuple[str, str], Tool]:
    return {(tool.name, tool.contract_version): tool for tool in tools}


@functools.lru_cache(maxsize=8)
def _demo_tools(path: str, sandbox_url: str) -> dict[tuple[str, str], Tool]:
    environ = {**os.environ, "COUNTERSIGN_SANDBOX_URL": sandbox_url}
    return _keyed(load_files([path], environ=environ))


@functools.lru_cache(maxsize=8)
def _configured_tools(paths: tuple[str, ...]) -> dict[tuple[str, str], Tool]:
    return _keyed(load_files(list(paths), environ=os.environ))


def configured_tools() -> dict[tuple[str, str], Tool]:
    """The tools of settings.COUNTERSIGN_CONNECTORS; ConnectorError if a file is unusable."""
    return _configured_tools(tuple(settings.COUNTERSIGN_CONNECTORS))


def _known() -> dict[tuple[str, str], Tool]:
    known = dict(configured_tools())
    if settings.SANDBOX_ENABLED:
        known.update(_demo_tools(settings.COUNTERSIGN_DEMO_CONNECTORS, settings.SANDBOX_URL))
    known.update(_REGISTERED)
    return known


def _version_order(version: str) -> tuple[int, str]:
    digits = version.removeprefix("v")
    return (int(digits), version) if digits.isdigit() else (-1, version)


def _unknown(name: str) -> UnsupportedTool:
    return UnsupportedTool(f"unknown tool {name!r}: it is not configured on this server")


def get_tool(name: str, contract_version: str | None = None) -> Tool:
    """The adapter for name at contract_version (the latest when None); UnsupportedTool if none."""
    known = _known()
    versions = [version for tool_name, version in known if tool_name == name]
    if not versions:
        raise _unknown(name)
    if contract_version is None:
        return known[(name, max(versions, key=_version_order))]
    tool = known.get((name, contract_version))
    if tool is None:
        raise UnsupportedTool(
            f"{name} has no contract version {contract_version!r} "
            f"(known: {', '.join(sorted(versions))})"
        )
    return tool


def redacted_error(text: str, *, tool: str) -> str:
    """A stored error of `tool` as an agent may read it: its connector's secrets and hosts
    out again (stored text is scrubbed already; a tool since reconfigured or a row written
    before this rule is not), and every internal address. A tool no longer configured
    leaves the addresses to hide."""
    try:
        return get_tool(tool).redacted(text)
    except UnsupportedTool:
        return redact(text)


def all_tools() -> list[Tool]:
    """Every tool at every contract version, by name then version."""
    known = _known()
    return [known[key] for key in sorted(known, key=lambda key: (key[0], _version_order(key[1])))]


def register_tool(tool: Tool) -> None:
    """Adds a tool for this process (a test's own). One under the same name and version is
    replaced."""
    _REGISTERED[(tool.name, tool.contract_version)] = tool


def unregister_tool(tool: Tool) -> None:
    _REGISTERED.pop((tool.name, tool.contract_version), None)
