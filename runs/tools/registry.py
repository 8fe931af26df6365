"""Every tool Countersign knows, by name and contract version.

Two sources, looked up together:
- the sandbox's tools (runs/tools/sandbox.py: ticket.*, notify.send, payment.*), the demo's
  fake external systems. They are known only while settings.SANDBOX_ENABLED is on (the demo,
  the tests and the benchmark's processes turn it on; control.settings_production refuses
  it). The setting is read at every lookup rather than once at import, so no process keeps
  them past the setting and override_settings switches them in tests. Off, they are unknown
  like any other name: a proposal for one is a 422 naming it, and a worker fails an action
  for one closed (`unsupported_tool`). The sandbox app and its database stay installed
  either way (its migrations and router must not depend on the flag); only its URL mount
  (control/urls.py) and these tools do.
- tools registered with register_tool: those named in settings.COUNTERSIGN_EXTRA_TOOLS
  (bench.settings adds `bench.noop`; production adds none), registered at import, and any a
  test registers for itself. One registered under a sandbox tool's name and version wins.
"""

from __future__ import annotations

from django.conf import settings

from runs.tools.base import Tool
from runs.tools.errors import UnsupportedTool
from runs.tools.sandbox import SANDBOX_TOOLS

_SANDBOX: dict[tuple[str, str], Tool] = {
    (tool_class.name, tool_class.contract_version): tool_class() for tool_class in SANDBOX_TOOLS
}
_REGISTERED: dict[tuple[str, str], Tool] = {}


def _known() -> dict[tuple[str, str], Tool]:
    if settings.SANDBOX_ENABLED:
        return {**_SANDBOX, **_REGISTERED}
    return _REGISTERED


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


def all_tools() -> list[Tool]:
    """Every tool at every contract version, by name then version."""
    known = _known()
    return [known[key] for key in sorted(known, key=lambda key: (key[0], _version_order(key[1])))]


def register_tool(tool: Tool) -> None:
    """Adds a tool beyond the sandbox's: the benchmark's no-op, the simulation's fake.
    A tool already registered under the same name and version is replaced."""
    _REGISTERED[(tool.name, tool.contract_version)] = tool


def unregister_tool(tool: Tool) -> None:
    _REGISTERED.pop((tool.name, tool.contract_version), None)


def _register_extra_tools() -> None:
    """Tools named (as dotted class paths) in settings.COUNTERSIGN_EXTRA_TOOLS: the benchmark
    runs its workers under bench.settings, which adds bench.noop; production adds none."""
    from django.utils.module_loading import import_string

    if not settings.configured:
        return
    for path in getattr(settings, "COUNTERSIGN_EXTRA_TOOLS", ()):
        register_tool(import_string(path)())


_register_extra_tools()
