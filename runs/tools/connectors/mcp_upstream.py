"""Connections to upstream MCP servers for the synchronous worker: one per server per process.

The MCP SDK is asynchronous and RQ workers are not. A daemon thread runs one asyncio loop
for the process; each upstream server (a command, or a URL with its headers) has one
connection, owned by a task on that loop (the SDK's context managers must be entered and
left by the same task), and the worker's thread reaches it with run_coroutine_threadsafe.

Every call first lists the server's tools on the connection it will use: that round trip
proves the connection alive before anything is written, so what a call raises says how
far its request got:

- NotSent: starting, reaching or initializing the server failed, or the listing did: the
  tools/call request was never written (a dead connection is replaced once first);
- NotListed: the server does not offer the tool: nothing was sent;
- Refused: the server answered the request with a protocol error that refuses it before
  running anything (JSON-RPC -32602 invalid params or unknown tool, -32601);
- Lost: anything else once the request was handed over (the connection closed, no answer
  in time, an answer that does not parse): it may have been applied. A broken connection
  is dropped, and the next call makes a new one.

The SDK is imported where it is used: the import takes most of a second, and every process
that loads a connector file imports this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shlex
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from runs.tools.bounded import DEFAULT_MAX_RESPONSE_BYTES

logger = logging.getLogger(__name__)

# How long the worker's thread waits for the loop beyond the call's own bounds.
_LOOP_GRACE_SECONDS = 5.0
_MAX_LISTING_PAGES = 100


class UpstreamError(Exception):
    """How far one request to an upstream got; the message says what happened."""


class NotSent(UpstreamError):
    pass


class NotListed(UpstreamError):
    pass


class Refused(UpstreamError):
    pass


class Lost(UpstreamError):
    pass


@dataclass(frozen=True)
class Server:
    """How to reach one upstream MCP server: a command over stdio, or a Streamable HTTP URL."""

    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    # The most of any one HTTP answer read (a tools/call's, a listing's, the event stream's).
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # How messages and logs name it: the connector passes it with its secrets scrubbed.
    shown: str = field(default="", compare=False)

    def __str__(self) -> str:
        if self.shown:
            return self.shown
        return self.url if self.url is not None else shlex.join(self.command)

    async def enter(self, stack: AsyncExitStack, connect_timeout: float) -> Any:
        """A connected, initialized mcp.Client whose lifetime is the stack's."""
        from mcp import Client, StdioServerParameters

        if self.url is None:
            server = StdioServerParameters(
                command=self.command[0],
                args=list(self.command[1:]),
                env=dict(self.env) or None,
                cwd=self.cwd,
            )
            return await stack.enter_async_context(Client(server, cache=None))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # Each call is bounded in time by the MCP layer; the HTTP client bounds connecting,
        # and every answer's size.
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(self.headers),
                timeout=httpx2.Timeout(connect_timeout, read=None),
                transport=_bounded_transport(self.max_response_bytes),
            )
        )
        transport = streamable_http_client(self.url, http_client=http)
        return await stack.enter_async_context(Client(transport, cache=None))


def call_tool(
    server: Server,
    name: str,
    arguments: dict[str, Any],
    *,
    connect_timeout: float,
    call_timeout: float,
) -> Any:
    """The server's mcp.types.CallToolResult for one tools/call; an UpstreamError otherwise."""
    upstreams = _upstreams()
    connection = upstreams.connection(server)
    coroutine = connection.call(
        name, arguments, connect_timeout=connect_timeout, call_timeout=call_timeout
    )
    # A dead connection costs a listing, a new connection and a listing before the call.
    return upstreams.run(coroutine, bound=3 * connect_timeout + call_timeout)


def _bounded_transport(max_bytes: int) -> Any:
    """httpx's transport whose answers end in an error past max_bytes, read as they come:
    the SDK then fails the request (a parse error), and a call is Lost, never held whole."""
    import httpx2

    class TooLarge(httpx2.StreamError):
        pass

    class Bounded(httpx2.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self.stream:
                seen += len(chunk)
                if seen > max_bytes:
                    raise TooLarge(f"the answer is larger than {max_bytes} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Transport(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            response.stream = Bounded(response.stream)
            return response

    return Transport()


async def list_tools(client: Any) -> list[Any]:
    """Every tool the server lists (mcp.types.Tool), page after page."""
    tools: list[Any] = []
    cursor = None
    for _ in range(_MAX_LISTING_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise RuntimeError(f"the tool listing goes on past {_MAX_LISTING_PAGES} pages")


def describe_error(error: BaseException) -> str:
    """One line for an error, an exception group's first leaf included."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    return text if text.startswith(type(error).__name__) else f"{type(error).__name__}: {text}"


class _Connection:
    """One upstream's client, owned by a task on the loop."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._opening = asyncio.Lock()

    async def call(
        self, name: str, arguments: dict[str, Any], *, connect_timeout: float, call_timeout: float
    ) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT

        client = await self._listing(name, connect_timeout)
        try:
            return await client.call_tool(name, arguments, read_timeout_seconds=call_timeout)
        except MCPError as error:
            # The errors by which a server refuses a request without running it.
            if error.code in (INVALID_PARAMS, METHOD_NOT_FOUND):
                raise Refused(f"JSON-RPC error {error.code}: {error.message}") from error
            if error.code == REQUEST_TIMEOUT:
                # The server may still be working on it; the next listing shows if it is stuck.
                raise Lost(f"no answer within {call_timeout:g} s") from error
            self._drop(client)
            raise Lost(f"JSON-RPC error {error.code}: {error.message}") from error
        except Exception as error:
            self._drop(client)
            raise Lost(describe_error(error)) from error

    async def _listing(self, name: str, connect_timeout: float) -> Any:
        """A client on a connection just proven alive whose server lists `name`."""
        reused = self._live() is not None
        try:
            client, names = await self._listed(connect_timeout)
        except NotSent:
            if not reused:
                raise
            # The connection died while idle (the server exited, the network went): once
            # more on a new one.
            client, names = await self._listed(connect_timeout)
        if name not in names:
            raise NotListed(f"it offers no tool {name!r}")
        return client

    async def _listed(self, connect_timeout: float) -> tuple[Any, set[str]]:
        client = await self._open(connect_timeout)
        try:
            async with asyncio.timeout(connect_timeout):
                return client, {tool.name for tool in await list_tools(client)}
        except Exception as error:
            self._drop(client)
            raise NotSent(f"listing its tools failed: {describe_error(error)}") from error

    def _live(self) -> Any:
        if self.client is not None and self._owner is not None and not self._owner.done():
            return self.client
        return None

    async def _open(self, connect_timeout: float) -> Any:
        async with self._opening:
            if self._live() is not None:
                return self.client
            started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._owner = asyncio.create_task(self._own(started, self._closing, connect_timeout))
            try:
                async with asyncio.timeout(connect_timeout):
                    self.client = await asyncio.shield(started)
            except TimeoutError as error:
                self._owner.cancel()
                raise NotSent(f"no connection within {connect_timeout:g} s") from error
            except Exception as error:
                raise NotSent(f"cannot connect: {describe_error(error)}") from error
            return self.client

    async def _own(
        self, started: asyncio.Future[Any], closing: asyncio.Event, connect_timeout: float
    ) -> None:
        try:
            async with AsyncExitStack() as stack:
                started.set_result(await self.server.enter(stack, connect_timeout))
                await closing.wait()
        except Exception as error:
            if not started.done():
                started.set_exception(error)
            else:
                logger.info("the connection to %s ended: %s", self.server, describe_error(error))

    def _drop(self, client: Any) -> None:
        """Lets go of a broken connection (not a newer one); its owner closes it."""
        if self.client is client:
            self.client = None
            self._closing.set()


class _Upstreams:
    """This process's loop thread and its connections."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.connections: dict[Server, _Connection] = {}
        threading.Thread(target=self.loop.run_forever, name="mcp-upstreams", daemon=True).start()

    def connection(self, server: Server) -> _Connection:
        with _lock:
            if server not in self.connections:
                self.connections[server] = _Connection(server)
            return self.connections[server]

    def run(self, coroutine: Coroutine[Any, Any, Any], *, bound: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout=bound + _LOOP_GRACE_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Lost(f"no answer within {bound:g} s") from None


_lock = threading.Lock()
_current: _Upstreams | None = None


def _upstreams() -> _Upstreams:
    """This process's upstreams; a forked child starts its own (the parent's thread is gone)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Upstreams()
        return _current


def run_on_loop(coroutine: Coroutine[Any, Any, Any], *, bound: float) -> Any:
    """Run coroutine on this process's upstream loop and wait at most bound seconds (more
    than asyncio.run can: a caller's thread may already run a loop of its own)."""
    return _upstreams().run(coroutine, bound=bound)
