"""`manage.py connectors check [FILE...]`, `connectors list` and
`connectors import-mcp NAME -- COMMAND...`.

check: loads each file (default: settings.COUNTERSIGN_CONNECTORS, and the demo's while the
sandbox is enabled) and reports the first problem of each by file, connector, tool and field;
with the database reachable, also any tool defined differently from its frozen definition.
list: every tool this server knows, with what it promises.
import-mcp: starts an MCP server, lists its tools and prints a connector definition to edit.
"""

from __future__ import annotations

import argparse
import os
from typing import ClassVar

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from runs.services.definitions import tool_definitions_changed
from runs.tools.base import Tool
from runs.tools.connectors.fields import ConnectorError
from runs.tools.connectors.files import load_files
from runs.tools.connectors.mcp_import import definition_text
from runs.tools.registry import all_tools

_COLUMNS = ("tool", "version", "kind", "effect class", "approval", "dedupes", "query", "proof")


def _default_files() -> list[str]:
    files = list(settings.COUNTERSIGN_CONNECTORS)
    if settings.SANDBOX_ENABLED:
        files.append(settings.COUNTERSIGN_DEMO_CONNECTORS)
    return files


def _proof(tool: Tool) -> str:
    if tool.effect_class == "read_only":
        return "-"
    return "digest echoed" if tool.echoes_digest else "key alone"


def _environ(path: str) -> dict[str, str]:
    if path == settings.COUNTERSIGN_DEMO_CONNECTORS:
        return {**os.environ, "COUNTERSIGN_SANDBOX_URL": settings.SANDBOX_URL}
    return dict(os.environ)


class Command(BaseCommand):
    help = "Check connector files, or list every tool they define."
    # A broken file must be checkable: the connectors system check would refuse to start.
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="subcommand", required=True)
        check = commands.add_parser("check", help="validate connector files")
        check.add_argument("files", nargs="*", help="default: COUNTERSIGN_CONNECTORS")
        commands.add_parser("list", help="every tool, with its effect class and promises")
        importer = commands.add_parser(
            "import-mcp", help="print a definition of an MCP server's tools, to edit"
        )
        importer.add_argument("name", help="the connector's name")
        importer.add_argument(
            "server_command", nargs=argparse.REMAINDER, help="-- COMMAND... starting the server"
        )

    def handle(self, *args, subcommand, **options):
        if subcommand == "check":
            self.check(options["files"] or _default_files(), verbosity=options["verbosity"])
        elif subcommand == "list":
            self.list()
        else:
            self.import_mcp(options["name"], options["server_command"])

    def check(self, files: list[str], *, verbosity: int) -> None:
        if not files:
            raise CommandError("no connector files: name them, or set COUNTERSIGN_CONNECTORS")
        failed = 0
        for path in files:
            try:
                tools = load_files([path], environ=_environ(path))
                problems = tool_definitions_changed(tools)
            except ConnectorError as error:
                problems = [str(error)]
            except DatabaseError as error:
                problems = []
                self.stderr.write(f"{path}: frozen definitions not compared ({error})")
            for problem in problems:
                self.stderr.write(self.style.ERROR(problem))
            failed += bool(problems)
            if not problems and verbosity:
                names = ", ".join(sorted(f"{t.name} {t.contract_version}" for t in tools))
                self.stdout.write(self.style.SUCCESS(f"{path}: ok ({names})"))
        if failed:
            raise CommandError(f"{failed} of {len(files)} connector files have problems")

    def import_mcp(self, name: str, command: list[str]) -> None:
        command = command[1:] if command[:1] == ["--"] else command
        try:
            self.stdout.write(definition_text(name, command), ending="")
        except ValueError as error:
            raise CommandError(str(error)) from None

    def list(self) -> None:
        try:
            tools = all_tools()
        except ConnectorError as error:
            raise CommandError(str(error)) from None
        rows = [_COLUMNS]
        for tool in tools:
            described = tool.describe()
            rows.append(
                (
                    tool.name,
                    tool.contract_version,
                    described["kind"],
                    tool.effect_class,
                    "needs approval" if tool.needs_approval else "no approval",
                    "dedupes" if tool.dedupes_by_key else "no dedupe",
                    "queryable" if tool.queryable_by_key else "no query",
                    _proof(tool),
                )
            )
        widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
        for row in rows:
            self.stdout.write(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
