"""`manage.py connectors check [FILE...]`, `connectors list [--tenant NAME]`,
`connectors enable|disable --tenant NAME (CONNECTOR... | --all)`,
`connectors import-mcp NAME -- COMMAND...` and
`connectors test TOOL [--version V] [--target T --args JSON] [--allow-writes]`.

check: loads each file (default: settings.COUNTERSIGN_CONNECTORS, and the demo's while the
sandbox is enabled) and reports the first problem of each by file, connector, tool and field;
with the database reachable, also any tool defined differently from its frozen definition.
list: every tool this server knows, with what it promises (and, with --tenant, whether
that tenant may use it).
enable / disable: which connectors a tenant may reach (audited; a new tenant has none);
enable's --reads-without-approval lets the connector's read_only tools run at once.
import-mcp: starts an MCP server, lists its tools and prints a connector definition to edit.
test: runs the contract suite (runs.tools.testing) against the tool's configured system and
prints each check as passed, failed with why, or not applicable with why; fails when one
failed. Without --allow-writes, nothing that would send a write runs: the write checks need
a test target (a sandbox, a test-mode account) and --allow-writes.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import ClassVar

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from control.exceptions import ControlError
from control.services import tenant_get
from runs.exceptions import RunsError
from runs.selectors import connectors_enabled
from runs.services import connectors_disable, connectors_enable
from runs.services.definitions import tool_definitions_changed
from runs.tools.base import Tool
from runs.tools.connectors.fields import ConnectorError
from runs.tools.connectors.files import load_files
from runs.tools.connectors.mcp_import import definition_text
from runs.tools.errors import ToolError
from runs.tools.registry import all_tools, get_tool
from runs.tools.testing import (
    FAILED,
    NOT_APPLICABLE,
    PASSED,
    ContractSuite,
    System,
    numbered_calls,
)

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


def _enablement(enabled: dict[str, bool], tool: Tool) -> str:
    if tool.connector not in enabled:
        return "not enabled"
    if tool.effect_class == "read_only":
        return "enabled, runs at once" if enabled[tool.connector] else "enabled, needs approval"
    return "enabled"


def _environ(path: str) -> dict[str, str]:
    if path == settings.COUNTERSIGN_DEMO_CONNECTORS:
        return {**os.environ, "COUNTERSIGN_SANDBOX_URL": settings.SANDBOX_URL}
    return dict(os.environ)


class Command(BaseCommand):
    help = "Check connector files, list the tools they define, enable or disable them per tenant."
    # A broken file must be checkable: the connectors system check would refuse to start.
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="subcommand", required=True)
        check = commands.add_parser("check", help="validate connector files")
        check.add_argument("files", nargs="*", help="default: COUNTERSIGN_CONNECTORS")
        listing = commands.add_parser("list", help="every tool, with its effect class and promises")
        listing.add_argument("--tenant", help="also say whether this tenant may use each tool")
        for name, verb in (("enable", "may use"), ("disable", "may no longer use")):
            switch = commands.add_parser(name, help=f"connectors a tenant {verb} (audited)")
            switch.add_argument("--tenant", required=True)
            switch.add_argument("connectors", nargs="*", metavar="CONNECTOR")
            switch.add_argument("--all", action="store_true", help="every connector")
            switch.add_argument("--dry-run", action="store_true", help="say, change nothing")
            if name == "enable":
                switch.add_argument(
                    "--reads-without-approval",
                    action="store_true",
                    help="its read_only tools run at once, without a person (default: off)",
                )
        importer = commands.add_parser(
            "import-mcp", help="print a definition of an MCP server's tools, to edit"
        )
        importer.add_argument("name", help="the connector's name")
        importer.add_argument(
            "server_command", nargs=argparse.REMAINDER, help="-- COMMAND... starting the server"
        )

        tester = commands.add_parser(
            "test", help="check a tool's promises against its configured system"
        )
        tester.add_argument("tool", help="the tool's full name, e.g. payments.charge")
        tester.add_argument("--version", help="its contract version (default: the newest)")
        tester.add_argument("--target", help="the target of each call; {n}: a fresh number")
        tester.add_argument(
            "--args",
            dest="call_args",
            metavar="JSON",
            help="the arguments of each call, a JSON object",
        )
        tester.add_argument(
            "--first",
            type=int,
            help="{n} counts up from this number (default: a random eight-digit start)",
        )
        tester.add_argument(
            "--allow-writes",
            action="store_true",
            help="also send writes (only against a test target: each write check makes one)",
        )

    def handle(self, *args, subcommand, **options):
        if subcommand == "check":
            self.check(options["files"] or _default_files(), verbosity=options["verbosity"])
        elif subcommand == "list":
            self.list(options["tenant"])
        elif subcommand in ("enable", "disable"):
            self.switch(subcommand, **options)
        elif subcommand == "test":
            self.test(**options)
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

    def test(self, *, tool, version, target, call_args, first, allow_writes, **_) -> None:
        if (target is None) != (call_args is None):
            raise CommandError("give --target and --args together (or neither: no calls)")
        try:
            arguments = None if call_args is None else json.loads(call_args)
        except json.JSONDecodeError as error:
            raise CommandError(f"--args is not JSON: {error}") from None
        if arguments is not None and not isinstance(arguments, dict):
            raise CommandError("--args must be a JSON object of arguments")
        try:
            found = get_tool(tool, version)
        except (ToolError, ConnectorError) as error:
            raise CommandError(str(error)) from None
        make_call = None if target is None else numbered_calls(target, arguments, first=first)
        if make_call is not None:
            given_target, given_args = make_call()
            try:
                found.normalize(target=given_target, args=given_args)
            except ToolError as error:
                raise CommandError(f"{found.name} refuses the call given: {error}") from None
        system = System(make_call=make_call, writes_allowed=allow_writes)
        writes = "writes allowed" if allow_writes else "no writes (--allow-writes sends them)"
        self.stdout.write(f"{found.name} {found.contract_version} against its system, {writes}:")
        outcome = ContractSuite(found, system).run()
        width = max(len(result.outcome) for result in outcome.results)
        for result in outcome.results:
            line = f"  {result.outcome.ljust(width)}  {result.name}"
            line += f": {result.detail}" if result.detail else ""
            style = self.style.ERROR if result.outcome == FAILED else str
            self.stdout.write(style(line))
        counts = [f"{len(outcome.named(kind))} {kind}" for kind in (PASSED, FAILED, NOT_APPLICABLE)]
        self.stdout.write(f"{outcome.tool}: {', '.join(counts)}")
        failed = outcome.named(FAILED)
        if failed:
            names = ", ".join(result.name for result in failed)
            raise CommandError(f"{found.name} breaks its contract: {names}")

    def switch(self, subcommand: str, *, tenant: str, connectors, **options) -> None:
        if bool(connectors) == options["all"]:
            raise CommandError("name the connectors, or --all (not both)")
        arguments = {
            "connectors": None if options["all"] else connectors,
            "actor": f"manage.py connectors {subcommand}",
            "dry_run": options["dry_run"],
        }
        try:
            arguments["tenant"] = tenant_get(tenant)
            if subcommand == "enable":
                reads = options["reads_without_approval"]
                changed = connectors_enable(**arguments, reads_without_approval=reads)
            else:
                changed = connectors_disable(**arguments)
        except (ControlError, RunsError, ConnectorError) as error:
            raise CommandError(str(error)) from None
        done = f"would {subcommand}" if options["dry_run"] else f"{subcommand}d"
        if not changed:
            self.stdout.write(f"{tenant}: nothing to {subcommand}")
            return
        said = f"{tenant}: {done} {', '.join(changed)}"
        if subcommand == "enable":
            reads = "run at once" if options["reads_without_approval"] else "need approval"
            said += f" (read_only tools {reads})"
        self.stdout.write(self.style.SUCCESS(said))

    def list(self, tenant_name: str | None) -> None:
        try:
            tools = all_tools()
            enabled = None
            if tenant_name is not None:
                enabled = connectors_enabled(tenant=tenant_get(tenant_name))
        except (ConnectorError, ControlError) as error:
            raise CommandError(str(error)) from None
        rows = [(*_COLUMNS, f"for {tenant_name}") if enabled is not None else _COLUMNS]
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
                    *(() if enabled is None else (_enablement(enabled, tool),)),
                )
            )
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
