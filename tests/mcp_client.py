"""The official MCP SDK's client against a live server's /mcp/, with a transcript of every
HTTP exchange. Each scenario runs on its own event loop in its own thread, so it works
beside Playwright's loop (which occupies the test's thread) as well as without it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation


class Transcript:
    """The JSON-RPC messages of a session as they crossed the wire, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def request(self, request: httpx2.Request) -> None:
        self.lines.append(f"--> {request.method} {request.url.path} {_body(request.content)}")

    async def response(self, response: httpx2.Response) -> None:
        await response.aread()
        self.lines.append(f"<-- {response.status_code} {_body(response.content)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _body(content: bytes) -> str:
    try:
        return json.dumps(json.loads(content), sort_keys=True)
    except ValueError:
        return content.decode(errors="replace")


def over_http(
    url: str,
    token: str | None,
    scenario: Callable[[Client], Awaitable[Any]],
    *,
    transcript: Transcript | None = None,
    mode: str = "auto",
    client_name: str = "tests",
) -> Any:
    """Runs `scenario` with an SDK client connected to `url` (Bearer `token`)."""

    async def connected() -> Any:
        hooks = {"request": [], "response": []}
        if transcript is not None:
            hooks = {"request": [transcript.request], "response": [transcript.response]}
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, event_hooks=hooks, timeout=60) as http:
            transport = streamable_http_client(url, http_client=http)
            info = Implementation(name=client_name, version="1")
            async with Client(transport, mode=mode, client_info=info) as client:
                return await scenario(client)

    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, connected()).result()
