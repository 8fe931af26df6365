"""The mcp kind against the reference server mcp-server-git on temporary repositories: what
a definition may say, one effect per call, the upstream's refusals, the probe, and how a
call that may or may not have reached the server is classified (real processes killed)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runs.tools.calls import ToolCall
from runs.tools.connectors.fields import ConnectorError
from runs.tools.errors import (
    BusinessRejection,
    ResultUncertain,
    TransientError,
    UnsupportedTool,
)
from runs.tools.testing import frozen_call
from tests.git_upstream import (
    GIT_CONNECTOR,
    commits,
    git,
    install_hook,
    make_repository,
    stage_file,
)
from tests.registry import connector_tools

# What the worker passes; an mcp tool's calls are bounded by its connector's own timeouts.
TIMEOUT = (3.05, 10.0)


def call_for(tool, target: str, args: dict, key: str = "run-1:step-1:repo:v1") -> ToolCall:
    return frozen_call(tool, target, args, key=key)


@pytest.fixture
def tools(tmp_path):
    return {tool.name: tool for tool in connector_tools(tmp_path, GIT_CONNECTOR)}


@pytest.fixture
def repository(tmp_path):
    return make_repository(tmp_path / "repository")


def one_tool(tmp_path, connection: str, tool: str = "", *, environ=None):
    """The single tool of a connector `git` with these connection and tool lines."""
    text = f"""
[connectors.git]
kind = "mcp"
{connection}

[connectors.git.tools.branch]
contract_version = "v1"
effect_class = "not_retriable"
target_schema = {{ type = "string" }}
{tool}

[connectors.git.tools.branch.args_schema]
type = "object"
properties.branch_name = {{ type = "string" }}
additionalProperties = false
"""
    [loaded] = connector_tools(tmp_path, text, environ=environ)
    return loaded


SERVER = f'command = ["{sys.executable}", "-m", "mcp_server_git"]'


@pytest.mark.parametrize(
    ("connection", "tool", "message"),
    [
        ("", "", "connector 'git': needs command (a server started over stdio) or url"),
        (
            SERVER + '\nurl = "http://127.0.0.1:1/mcp"',
            "",
            "connector 'git', field 'url': give command or url, not both",
        ),
        ("command = []", "", "field 'command': must be the program and its arguments"),
        ('url = "ftp://example.com/mcp"', "", "field 'url': must start with http:// or https://"),
        (
            'url = "http://127.0.0.1:1/mcp"\nenv = { TOKEN = "x" }',
            "",
            "field 'env': is for a command; a url server takes headers",
        ),
        (SERVER + "\ntimeout = 0", "", "field 'timeout': must be a number >= 1"),
        (
            SERVER,
            'target_argument = "branch_name"',
            "tool 'branch', field 'target_argument': 'branch_name' is also a property of "
            "args_schema",
        ),
        (
            SERVER,
            'probe = { tool = "git_log", arguments = { repo_path = "{key}" } }',
            "tool 'branch', field 'probe.arguments': {key} has no value in a probe",
        ),
        (
            SERVER,
            'satisfied_when = { pointer = "/text", equals = "x" }',
            "tool 'branch', field 'satisfied_when': needs a probe",
        ),
        (
            SERVER,
            "retry = { call_timeout = [1, 2] }",
            "tool 'branch', field 'retry.call_timeout': an mcp tool's calls are bounded by "
            "its connector's connect_timeout and timeout",
        ),
        (SERVER, 'upstream = "git_log"', "tool 'branch', field 'upstream': is not a known field"),
    ],
    ids=[
        "no-server",
        "command-and-url",
        "empty-command",
        "ftp-url",
        "env-with-url",
        "zero-timeout",
        "target-in-args",
        "probe-placeholder",
        "satisfied-without-probe",
        "retry-call-timeout",
        "unknown-field",
    ],
)
def test_a_definition_is_refused_with_the_place_and_the_reason(tmp_path, connection, tool, message):
    with pytest.raises(ConnectorError, match=re.escape(message)) as refused:
        one_tool(tmp_path, connection, tool)
    assert str(refused.value).startswith(str(tmp_path / "connectors.toml"))


def test_an_mcp_tool_declares_that_mcp_has_no_idempotency_keys(tools):
    branch = tools["git.branch"]
    assert (branch.dedupes_by_key, branch.queryable_by_key, branch.echoes_digest) == (
        False,
        False,
        False,
    )
    assert not branch.retry_after_uncertain_allowed
    assert branch.describe()["kind"] == "mcp"
    assert branch.capabilities() == [
        "a resend is a second effect",
        "cannot be queried",
        "the receipt's proof is the key alone",
    ]


def test_an_execute_creates_the_branch_once_and_a_second_is_refused_by_the_upstream(
    tools, repository
):
    branch = tools["git.branch"]
    call = call_for(branch, str(repository), {"branch_name": "release-1"})

    receipt = branch.execute(call, timeout=TIMEOUT)

    assert (receipt.idempotency_key, receipt.intent_digest) == (
        call.idempotency_key,
        call.intent_digest,
    )
    assert receipt.status == "ok"
    assert receipt.target_version is None
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", receipt.raw_response_hash)
    assert receipt.receipt_id == "mcp_" + receipt.raw_response_hash[7:39]
    assert git(repository, "branch", "--list", "release-*").split() == ["release-1"]
    with pytest.raises(BusinessRejection, match="refs/heads/release-1 already exists"):
        branch.execute(call, timeout=TIMEOUT)
    assert git(repository, "branch", "--list", "release-*").split() == ["release-1"]


def test_an_upstream_is_error_result_is_a_business_rejection_with_its_text(tools, repository):
    commit = tools["git.commit"]
    with pytest.raises(BusinessRejection) as refused:
        commit.execute(call_for(commit, str(repository), {"message": "empty"}), timeout=TIMEOUT)
    assert "git_commit refused: Error executing tool git_commit: No changes staged" in str(
        refused.value
    )
    assert not commit.outcome_unknown_after(refused.value)
    assert commits(repository) == ["initial"]


def test_read_returns_the_probes_answer_the_log_and_the_branches(tools, repository):
    stage_file(repository, "notes.txt")
    commit = tools["git.commit"]
    commit.execute(call_for(commit, str(repository), {"message": "add notes"}), timeout=TIMEOUT)
    head = git(repository, "rev-parse", "HEAD").strip()

    log = commit.read(str(repository), timeout=TIMEOUT)
    branches = tools["git.branch"].read(str(repository), timeout=TIMEOUT)

    assert log["probe"] == "git_log"
    assert f"Commit: {head}" in log["text"]
    assert "Message: add notes" in log["text"]
    assert "structured" not in log  # mcp-server-git answers text only
    assert branches == {"probe": "git_branch", "text": "* main"}


def test_a_server_killed_after_the_call_was_sent_leaves_it_uncertain_then_reconnects(
    tools, repository
):
    commit = tools["git.commit"]
    stage_file(repository, "one.txt")
    # git runs the hook after the commit is written, as a child of the server: the server
    # dies with the effect applied and its answer unsent.
    install_hook(repository, "post-commit", "kill -9 $PPID")

    with pytest.raises(ResultUncertain, match="was sent and may have been applied") as lost:
        commit.execute(call_for(commit, str(repository), {"message": "one"}), timeout=TIMEOUT)

    assert commit.outcome_unknown_after(lost.value)
    assert commits(repository) == ["one", "initial"]
    (repository / ".git" / "hooks" / "post-commit").unlink()
    stage_file(repository, "two.txt")
    commit.execute(call_for(commit, str(repository), {"message": "two"}), timeout=TIMEOUT)
    assert commits(repository) == ["two", "one", "initial"]


def test_a_call_unanswered_within_the_timeout_is_uncertain(tmp_path, repository):
    text = GIT_CONNECTOR.replace('kind = "mcp"', 'kind = "mcp"\ntimeout = 1')
    commit = {tool.name: tool for tool in connector_tools(tmp_path, text)}["git.commit"]
    stage_file(repository, "slow.txt")
    install_hook(repository, "post-commit", "sleep 1.5")
    commit.read(str(repository), timeout=TIMEOUT)  # connected: only the call is timed

    started = time.monotonic()
    with pytest.raises(ResultUncertain, match="no answer within 1 s"):
        commit.execute(call_for(commit, str(repository), {"message": "slow"}), timeout=TIMEOUT)

    assert time.monotonic() - started < 1.5
    assert commits(repository) == ["slow", "initial"]


def test_a_tool_the_server_does_not_offer_is_refused_before_anything_is_sent(tmp_path):
    rebase = one_tool(tmp_path, SERVER, 'upstream_tool = "git_rebase"')
    with pytest.raises(UnsupportedTool, match="it offers no tool 'git_rebase'"):
        rebase.execute(call_for(rebase, "/tmp/any", {"branch_name": "b"}), timeout=TIMEOUT)


def test_a_server_that_cannot_start_is_transient_and_its_secret_stays_out_of_the_error(
    tmp_path,
):
    connection = 'command = ["/nonexistent/mcp-server", "--token", "${GIT_TOKEN}"]'
    tool = one_tool(tmp_path, connection, environ={"GIT_TOKEN": "s3cret-t0ken"})

    with pytest.raises(TransientError) as refused:
        tool.execute(call_for(tool, "repo", {"branch_name": "b"}), timeout=TIMEOUT)

    message = str(refused.value)
    assert "/nonexistent/mcp-server --token ${GIT_TOKEN}: cannot connect" in message
    assert "branch was not sent" in message
    assert "s3cret-t0ken" not in message
    assert not tool.outcome_unknown_after(refused.value)


def test_a_server_that_exits_before_its_handshake_is_transient(tmp_path):
    connection = f'command = ["{sys.executable}", "-c", "raise SystemExit(3)"]'
    tool = one_tool(tmp_path, connection)
    with pytest.raises(TransientError, match="cannot connect") as refused:
        tool.execute(call_for(tool, "repo", {"branch_name": "b"}), timeout=TIMEOUT)
    assert not tool.outcome_unknown_after(refused.value)


def test_an_unreachable_url_is_transient_and_neither_its_secret_nor_address_is_in_the_error(
    tmp_path, closed_port
):
    connection = (
        f'url = "http://127.0.0.1:{closed_port}/mcp?key=${{GIT_TOKEN}}"\n'
        'headers = { Authorization = "Bearer ${GIT_TOKEN}" }'
    )
    tool = one_tool(tmp_path, connection, environ={"GIT_TOKEN": "s3cret-t0ken"})

    with pytest.raises(TransientError) as refused:
        tool.execute(call_for(tool, "repo", {"branch_name": "b"}), timeout=TIMEOUT)

    message = str(refused.value)
    assert "MCP server [internal address]: cannot connect" in message
    assert "s3cret-t0ken" not in message
    assert "127.0.0.1" not in message
    assert str(closed_port) not in message


def test_the_documented_example_loads(tmp_path):
    document = (Path(__file__).resolve().parents[2] / "docs" / "CONNECTORS.md").read_text()
    section = document[document.index("## The mcp kind") :]
    example = section[section.index("```toml\n") + 8 : section.index("```\n")]
    environ = {"GIT_AUTHOR_EMAIL": "agents@example.com"}

    loaded = {tool.name: tool for tool in connector_tools(tmp_path, example, environ=environ)}

    assert set(loaded) == {"git.create_branch", "git.commit", "git.log"}
    assert loaded["git.commit"].probe.tool == "git_log"
    assert loaded["git.log"].needs_approval is False


@pytest.fixture
def git_server_over_http(closed_port):
    """mcp-server-git's own server served over Streamable HTTP; its URL."""
    serve = (
        "from mcp_server_git.server import create_server; "
        f"create_server(None).run(transport='streamable-http', port={closed_port})"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", serve], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", closed_port)) == 0:
                break
        assert process.poll() is None, "the server exited"
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{closed_port}/mcp"
    process.kill()
    process.wait(timeout=10)


def test_over_streamable_http_a_commit_is_made_then_a_dying_server_is_uncertain_then_gone(
    tmp_path, repository, git_server_over_http
):
    connection = f'url = "{git_server_over_http}"\nheaders = {{ Authorization = "Bearer x" }}'
    text = re.sub(r"^command = .*$", connection, GIT_CONNECTOR, flags=re.MULTILINE)
    commit = {tool.name: tool for tool in connector_tools(tmp_path, text)}["git.commit"]
    stage_file(repository, "one.txt")
    commit.execute(call_for(commit, str(repository), {"message": "one"}), timeout=TIMEOUT)
    stage_file(repository, "two.txt")
    install_hook(repository, "post-commit", "kill -9 $PPID")

    with pytest.raises(ResultUncertain, match="was sent and may have been applied"):
        commit.execute(call_for(commit, str(repository), {"message": "two"}), timeout=TIMEOUT)
    with pytest.raises(TransientError, match="cannot connect") as gone:
        commit.execute(call_for(commit, str(repository), {"message": "three"}), timeout=TIMEOUT)

    assert "git_commit was not sent" in str(gone.value)
    assert commits(repository) == ["two", "one", "initial"]


def diff_reader(tmp_path, url: str, limit: str):
    text = f"""
[connectors.gitweb]
kind = "mcp"
url = "{url}"
timeout = 5
{limit}

[connectors.gitweb.tools.diff]
upstream_tool = "git_diff_staged"
contract_version = "v1"
effect_class = "read_only"
target_argument = "repo_path"
target_schema = {{ type = "string" }}
args_schema = {{ type = "object", additionalProperties = false }}
"""
    tmp_path.mkdir()
    [tool] = connector_tools(tmp_path, text)
    return tool


def test_over_streamable_http_an_answer_past_max_response_bytes_is_cut_off(
    tmp_path, repository, git_server_over_http
):
    stage_file(repository, "big.txt", "a line of a large staged file\n" * 4000)
    whole = diff_reader(tmp_path / "whole", git_server_over_http, "")
    _, answer = whole.fetch(call_for(whole, str(repository), {}), timeout=TIMEOUT)
    assert len(answer["text"]) > 100_000

    bounded = diff_reader(tmp_path / "bounded", git_server_over_http, "max_response_bytes = 50000")
    started = time.monotonic()
    with pytest.raises(TransientError, match="larger than 50000 bytes"):
        bounded.fetch(call_for(bounded, str(repository), {}), timeout=TIMEOUT)
    assert time.monotonic() - started < 5 + 3


def test_max_response_bytes_is_for_a_url_server(tmp_path):
    with pytest.raises(ConnectorError, match=r"max_response_bytes.*is for a url"):
        one_tool(tmp_path, 'command = ["true"]\nmax_response_bytes = 100')
