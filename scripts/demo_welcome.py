"""What the demo prints once it runs: where to log in and as whom, the MCP gateway and a
desktop client's entry for it, and the README's follow-up commands at the demo's own port."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
DEMO_TENANT = "demo"
DEMO_USERS = ("operator", "reconciler", "auditor", "admin")  # each has the role of its name


def mcp_accepts(port: int, token: str) -> bool:
    """Does /mcp/ accept the token (a handshake answered 200, not 401)?"""
    handshake = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "demo"},
        },
    }
    request = urllib.request.Request(
        f"http://{HOST}:{port}/mcp/",
        data=json.dumps(handshake).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def mcp_client_config(port: int, token: str) -> str:
    """A desktop MCP client's entry for the demo, through the stdio bridge countersign-mcp."""
    bridge = Path(sys.executable).parent / "countersign-mcp"
    server = {
        "command": str(bridge),
        "args": ["--url", f"http://{HOST}:{port}/mcp/"],
        "env": {"COUNTERSIGN_TOKEN": token},
    }
    return json.dumps({"mcpServers": {"countersign": server}}, indent=2)


def describe_database(url: str) -> str:
    if url.startswith("sqlite:///"):
        return f"SQLite in {Path(url.removeprefix('sqlite:///')).parent}"
    return "PostgreSQL from DATABASE_URL"


def print_welcome(port: int, passwords: dict[str, str], token: str) -> None:
    """Where to log in, as whom, the MCP gateway, and what to try next, on this port."""
    width = max(len(username) for username in DEMO_USERS)
    rule = "-" * max(len(passwords[username]) for username in DEMO_USERS)
    print()
    print(f"Countersign is running: http://{HOST}:{port}/accounts/login/")
    print()
    print(f"  {'username':<{width}}  password")
    print(f"  {'-' * width}  {rule}")
    for username in DEMO_USERS:
        print(f"  {username:<{width}}  {passwords[username]}")
    print()
    print(f"Each user has the role of its name in tenant {DEMO_TENANT!r}. Ctrl-C stops the demo.")
    print()
    print(f"MCP: http://{HOST}:{port}/mcp/ with the header Authorization: Bearer {token}")
    print("A desktop MCP client's configuration (its mcpServers entry):")
    print(mcp_client_config(port, token))
    print()
    print("More to try, in another shell from the project root (README.md, The demo):")
    for line in follow_up_commands(port):
        print(f"  {line}")
    print()


def follow_up_commands(port: int) -> list[str]:
    """The README's follow-up commands, at the address the demo serves."""
    agent = f".venv/bin/python manage.py demo_agent --url http://{HOST}:{port}"
    fault = '{"tool": "notify.send", "fault": "commit_then_drop", "count": 1}'
    return [
        "export DJANGO_DEBUG=1",
        f"{agent} --scenario notifications --count 5",
        f"{agent} --scenario saga --ship-fails",
        f"curl -s -X POST http://{HOST}:{port}/sandbox/faults -d '{fault}'",
        f"{agent} --scenario notifications --count 2",
    ]
