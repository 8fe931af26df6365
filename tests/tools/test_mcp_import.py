"""import-mcp's definition text, from the reference servers mcp-server-git and
@modelcontextprotocol/server-filesystem: it loads as printed, reads become read_only without
approval, writes need approval and are not_retriable, args_schema follows inputSchema
(arrays of strings and of objects included), and what does not fit is said."""

from __future__ import annotations

import sys
import textwrap

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from control.foundation.canonical import intent_digest
from runs.tools.calls import ToolCall
from runs.tools.connectors.files import load_file
from runs.tools.connectors.mcp_import import definition_text
from runs.tools.errors import InvalidArguments
from tests.filesystem_upstream import FILESYSTEM_SERVER
from tests.git_upstream import git, make_repository

GIT_SERVER = [sys.executable, "-m", "mcp_server_git"]


@pytest.fixture(scope="module")
def imported() -> str:
    return definition_text("git", GIT_SERVER)


@pytest.fixture
def tools(imported, tmp_path):
    path = tmp_path / "git.toml"
    path.write_text(imported)
    return {tool.name: tool for tool in load_file(str(path), environ={})}


def test_every_tool_that_fits_loads_reads_without_approval_and_writes_with_it(tools):
    reads = {"branch", "diff", "diff_staged", "diff_unstaged", "log", "show", "status"}
    writes = {"add", "checkout", "commit", "create_branch", "reset"}
    assert set(tools) == {f"git.git_{name}" for name in reads | writes}
    for name in reads:
        tool = tools[f"git.git_{name}"]
        assert (tool.effect_class, tool.needs_approval) == ("read_only", False)
    for name in writes:
        tool = tools[f"git.git_{name}"]
        assert (tool.effect_class, tool.needs_approval) == ("not_retriable", True)
        assert tool.upstream_tool == f"git_{name}"
        assert tool.target_argument is None


def test_args_schema_follows_the_upstream_input_schema(tools):
    log = tools["git.git_log"].args_schema
    assert log["required"] == ["repo_path"]
    assert log["additionalProperties"] is False
    assert log["properties"]["max_count"] == {"type": "integer", "title": "Max Count"}
    # Optional[str] upstream (anyOf string or null): a string that may be left out.
    assert log["properties"]["start_timestamp"]["type"] == "string"
    assert log["properties"]["start_timestamp"]["description"].startswith("Start timestamp")


def test_an_array_argument_keeps_its_items_and_bounds(tools):
    files = tools["git.git_add"].args_schema["properties"]["files"]
    assert files == {"type": "array", "minItems": 1, "title": "Files", "items": {"type": "string"}}
    _, args = tools["git.git_add"].normalize(
        target="the repository", args={"repo_path": "/srv/repo", "files": ["a.txt", "b.txt"]}
    )
    assert args["files"] == ["a.txt", "b.txt"]


def test_the_filesystem_servers_edit_file_imports_its_array_of_objects(tmp_path):
    imported = definition_text("files", [FILESYSTEM_SERVER, str(tmp_path)])
    path = tmp_path / "files.toml"
    path.write_text(imported)
    tools = {tool.name: tool for tool in load_file(str(path), environ={})}

    edit = tools["files.edit_file"]
    assert (edit.effect_class, edit.needs_approval) == ("not_retriable", True)
    item = edit.args_schema["properties"]["edits"]["items"]
    assert item["required"] == ["oldText", "newText"]
    assert item["additionalProperties"] is False
    with pytest.raises(InvalidArguments, match=r"args\.edits\[0\]\.newText is required"):
        edit.normalize(target="t", args={"path": "/a", "edits": [{"oldText": "x"}]})
    # Its optional number arguments are outside the subset: left out, and said.
    assert '# left out: args.head is of type "number"' in imported
    assert "properties.head" not in imported


def test_a_tool_with_a_required_argument_outside_the_subset_is_printed_commented_out(tmp_path):
    server = tmp_path / "pay_server.py"
    server.write_text(
        textwrap.dedent(
            """
            from mcp.server.mcpserver import MCPServer

            server = MCPServer("pay")

            @server.tool()
            def charge(customer: str, amount: float) -> str:
                return "charged"

            @server.tool()
            def refund(charge_id: str) -> str:
                return "refunded"

            server.run()
            """
        )
    )
    imported = definition_text("pay", [sys.executable, str(server)])

    assert '# not imported: args.amount (required) is of type "number"' in imported
    assert "# [connectors.pay.tools.charge]" in imported
    assert '# upstream_tool = "charge"' in imported
    assert "\n[connectors.pay.tools.refund]\n" in imported


def test_an_imported_write_calls_its_upstream_tool(tools, tmp_path):
    repository = make_repository(tmp_path / "repository")
    branch = tools["git.git_create_branch"]
    target, args = branch.normalize(
        target="the repository", args={"repo_path": str(repository), "branch_name": "imported"}
    )
    call = ToolCall(
        tool=branch.name,
        target=target,
        args=args,
        idempotency_key="run-1:step-1:the repository:v1",
        intent_digest=intent_digest(tool=branch.name, target=target, args=args),
    )

    branch.execute(call, timeout=(3.05, 10.0))

    assert git(repository, "branch", "--list", "imported").split() == ["imported"]


def test_a_connector_name_is_checked_before_anything_starts():
    with pytest.raises(ValueError, match="a connector name is lower case"):
        definition_text("Git Tools", GIT_SERVER)


def test_the_command_prints_the_definition_and_names_a_server_that_will_not_start(capsys):
    call_command("connectors", "import-mcp", "git", "--", *GIT_SERVER)
    printed = capsys.readouterr().out
    assert printed.startswith("# Connector 'git': the tools of the MCP server")
    assert "[connectors.git.tools.git_log]" in printed

    with pytest.raises(CommandError, match="could not list the tools of `/nonexistent/server`"):
        call_command("connectors", "import-mcp", "git", "--", "/nonexistent/server")
