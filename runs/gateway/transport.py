"""One HTTP exchange of /mcp/ through the official SDK's stateless, JSON-answering Streamable
HTTP handler, as an ASGI call (runs.gateway.http hands it the request)."""

from __future__ import annotations

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from runs.gateway.server import build_server
from runs.gateway.sessions import Caller


async def serve(caller: Caller, scope: dict, body: bytes) -> tuple[int, list, bytes]:
    """One HTTP exchange through the SDK's stateless, JSON-answering handler."""
    manager = StreamableHTTPSessionManager(
        app=build_server(caller), json_response=True, stateless=True
    )
    answered = anyio.Event()
    delivered = False
    status, headers, chunks = 500, [], []

    async def receive() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(event: dict) -> None:
        nonlocal status
        if event["type"] == "http.response.start":
            status = event["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in event["headers"])
        elif event["type"] == "http.response.body":
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                answered.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    answered.set()
    return status, headers, b"".join(chunks)
