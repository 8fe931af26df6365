"""Every tool Countersign knows, by name and contract version."""

from __future__ import annotations

from runs.tools.base import Tool
from runs.tools.errors import UnsupportedTool
from runs.tools.sandbox import SANDBOX_TOOLS

_TOOLS: dict[tuple[str, str], Tool] = {
    (tool_class.name, tool_class.contract_version): tool_class() for tool_class in SANDBOX_TOOLS
}


def _version_order(version: str) -> tuple[int, str]:
    digits = version.removeprefix("v")
    return (int(digits), version) if digits.isdigit() else (-1, version)


def get_tool(name: str, contract_version: str | None = None) -> Tool:
    """The adapter for name at contract_version (the latest when None); UnsupportedTool if none."""
    if contract_version is not None:
        tool = _TOOLS.get((name, contract_version))
        if tool is None:
            known = sorted(version for tool_name, version in _TOOLS if tool_name == name)
            if not known:
                raise UnsupportedTool(f"unknown tool {name!r}")
            raise UnsupportedTool(
                f"{name} has no contract version {contract_version!r} (known: {', '.join(known)})"
            )
        return tool
    versions = [version for tool_name, version in _TOOLS if tool_name == name]
    if not versions:
        raise UnsupportedTool(f"unknown tool {name!r}")
    return _TOOLS[(name, max(versions, key=_version_order))]


def all_tools() -> list[Tool]:
    """Every tool at every contract version, by name then version."""
    return [_TOOLS[key] for key in sorted(_TOOLS, key=lambda key: (key[0], _version_order(key[1])))]


def register_tool(tool: Tool) -> None:
    """Adds a tool beyond the sandbox's: the benchmark's no-op, the simulation's fake.
    A tool already registered under the same name and version is replaced."""
    _TOOLS[(tool.name, tool.contract_version)] = tool


def unregister_tool(tool: Tool) -> None:
    _TOOLS.pop((tool.name, tool.contract_version), None)


def _register_extra_tools() -> None:
    """Tools named (as dotted class paths) in settings.COUNTERSIGN_EXTRA_TOOLS: the benchmark
    runs its workers under bench.settings, which adds bench.noop; production adds none."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    if not settings.configured:
        return
    for path in getattr(settings, "COUNTERSIGN_EXTRA_TOOLS", ()):
        register_tool(import_string(path)())


_register_extra_tools()
