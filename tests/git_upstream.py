"""The reference MCP server mcp-server-git as an upstream: a connector file for it and real
temporary repositories to point it at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The server over stdio, with no --repository: every call names its repository (the target).
GIT_CONNECTOR = f"""
[connectors.git]
kind = "mcp"
description = "mcp-server-git over stdio"
command = ["{sys.executable}", "-m", "mcp_server_git"]

[connectors.git.tools.branch]
upstream_tool = "git_create_branch"
contract_version = "v1"
effect_class = "not_retriable"
target_argument = "repo_path"
target_schema = {{ type = "string", pattern = "^/.+$" }}
probe = {{ tool = "git_branch", arguments = {{ repo_path = "{{target}}", branch_type = "local" }} }}

[connectors.git.tools.branch.args_schema]
type = "object"
properties.branch_name = {{ type = "string", pattern = "^[a-z][a-z0-9-]*$" }}
required = ["branch_name"]
additionalProperties = false

[connectors.git.tools.commit]
upstream_tool = "git_commit"
contract_version = "v1"
effect_class = "not_retriable"
target_argument = "repo_path"
target_schema = {{ type = "string", pattern = "^/.+$" }}
probe = {{ tool = "git_log", arguments = {{ repo_path = "{{target}}", max_count = 20 }} }}

[connectors.git.tools.commit.args_schema]
type = "object"
properties.message = {{ type = "string", minLength = 1 }}
required = ["message"]
additionalProperties = false
"""

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Countersign Tests",
    "GIT_AUTHOR_EMAIL": "tests@example.com",
    "GIT_COMMITTER_NAME": "Countersign Tests",
    "GIT_COMMITTER_EMAIL": "tests@example.com",
}


def git(repository: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", *args],
        cwd=repository,
        env={**os.environ, **_IDENTITY},
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout


def make_repository(path: Path) -> Path:
    """A repository with one commit on main, and its identity in its own config (the
    server's commits read it there)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "config", "user.name", _IDENTITY["GIT_AUTHOR_NAME"])
    git(path, "config", "user.email", _IDENTITY["GIT_AUTHOR_EMAIL"])
    git(path, "commit", "--quiet", "--allow-empty", "--message=initial")
    return path


def stage_file(repository: Path, name: str, text: str = "content\n") -> None:
    (repository / name).write_text(text)
    git(repository, "add", name)


def commits(repository: Path) -> list[str]:
    """Subjects of the commits on HEAD, newest first."""
    return git(repository, "log", "--format=%s").splitlines()


def install_hook(repository: Path, name: str, script: str) -> None:
    hook = repository / ".git" / "hooks" / name
    hook.write_text("#!/bin/sh\n" + script + "\n")
    hook.chmod(0o755)
