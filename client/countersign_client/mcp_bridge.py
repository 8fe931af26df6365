"""countersign-mcp: Countersign's MCP gateway for desktop clients, over stdio
(`pip install 'countersign-client[mcp]'`).

Desktop MCP clients (Claude Desktop, Cursor) launch local servers and talk to them over
stdin and stdout. This is such a server: it forwards tools/list and tools/call to a
Countersign gateway (`/mcp/`, Streamable HTTP) with the tenant's API token and hands the
answers back unchanged, so each write the model asks for waits in Countersign's inbox.

    COUNTERSIGN_TOKEN=cs_... countersign-mcp --url https://countersign.example/mcp/

The token is read from the environment only: a command line is visible to anyone in `ps`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import anyio
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError
except ImportError as missing:  # the extra is optional: name it
    raise ImportError(
        "countersign-mcp needs the MCP SDK: pip install 'countersign-client[mcp]'"
    ) from missing

from countersign_client import __version__

NAME = "countersign-mcp"
# The gateway's revision, adopted without a handshake: it answers each request on its own, so
# nothing is set up that a failure at start could leave broken, and a Countersign that comes
# up after the desktop client launched the bridge answers the next call.
GATEWAY_PROTOCOL = "2026-07-28"
# countersign_wait holds its answer up to 50 s; past this, the call fails instead of hanging.
READ_TIMEOUT_SECONDS = 90.0
CONNECT_TIMEOUT_SECONDS = 10.0
UNAVAILABLE = -32010  # JSON-RPC's implementation-defined range: Countersign did not answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=NAME,
        description="Serve a Countersign MCP gateway over stdio; the token is COUNTERSIGN_TOKEN.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("COUNTERSIGN_URL"),
        help="the gateway, like https://countersign.example/mcp/ (default: $COUNTERSIGN_URL)",
    )
    url = parser.parse_args(argv).url
    token = os.environ.get("COUNTERSIGN_TOKEN", "").strip()
    if not url or not url.startswith(("http://", "https://")):
        sys.exit(f"{NAME}: pass --url http(s)://HOST/mcp/ or set COUNTERSIGN_URL")
    if not token:
        sys.exit(f"{NAME}: set COUNTERSIGN_TOKEN to a tenant API token (never an argument)")
    anyio.run(serve, url, token)


async def serve(url: str, token: str) -> None:
    """Bridge stdin/stdout to the gateway at `url` until the desktop client closes stdin."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_SECONDS, read=READ_TIMEOUT_SECONDS),
        transport=FailuresAsErrors(url),
    )
    remote = Client(
        streamable_http_client(url, http_client=http),
        mode=GATEWAY_PROTOCOL,
        client_info=types.Implementation(name=NAME, version=__version__),
        cache=None,  # every tools/list asks Countersign: the tenant's catalog may change
    )
    # One remote connection for the bridge's life, opened at start rather than at the first
    # call: its discovery puts a wrong URL or token in the desktop client's log at launch,
    # and brings the gateway's instructions (how to wait for a person's decision) in time
    # for our answer to the desktop client's initialize.
    async with http, remote:
        server = bridge(remote, await discovered_instructions(remote))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def discovered_instructions(remote: Client) -> str | None:
    """The gateway's instructions, or None (said on stderr) when it does not answer."""
    try:
        discovered = await remote.session.send_discover(GATEWAY_PROTOCOL)
    except MCPError as error:
        say(f"{error.message}; each call will try again")
        return None
    remote.session.adopt(types.DiscoverResult.model_validate(discovered))
    return remote.instructions


def bridge(remote: Client, instructions: str | None) -> Server:
    """A stdio server answering tools/list and tools/call with `remote`'s answers."""

    async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        with errors_said():
            return await remote.list_tools(cursor=params.cursor if params else None)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        with errors_said():
            return await remote.call_tool(params.name, params.arguments)

    return Server(
        NAME,
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


@contextmanager
def errors_said() -> Iterator[None]:
    """The remote's error goes to the desktop client as it is, and on stderr (its log)."""
    try:
        yield
    except MCPError as error:
        say(error.message)
        raise


class FailuresAsErrors(httpx2.AsyncBaseTransport):
    """HTTP to Countersign, whose failures come back as JSON-RPC errors: the SDK hands
    one to the request that met it, and the desktop client shows its message.

    Left to the SDK, a refused connection or a timeout ends its transport (the bridge
    would die mid-call) and a 401 reads "Server returned an error response".
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self.http.handle_async_request(request)
        except httpx2.TimeoutException:
            return self.failure(request, "did not answer in time")
        except httpx2.TransportError as error:
            return self.failure(request, f"cannot be reached ({error})")
        if response.status_code == 401:
            await response.aclose()
            return self.failure(request, "refused the token (401): check COUNTERSIGN_TOKEN")
        json_answer = response.headers.get("content-type", "").startswith("application/json")
        if response.status_code >= 400 and not json_answer:  # a proxy's page, a rate limit
            await response.aclose()
            return self.failure(request, f"answered HTTP {response.status_code}")
        return response

    def failure(self, request: httpx2.Request, what: str) -> httpx2.Response:
        error = {"code": UNAVAILABLE, "message": f"Countersign at {self.url} {what}"}
        return httpx2.Response(
            502, json={"jsonrpc": "2.0", "id": None, "error": error}, request=request
        )

    async def aclose(self) -> None:
        await self.http.aclose()


def say(message: str) -> None:
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
