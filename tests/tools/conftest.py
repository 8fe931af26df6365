"""Fixtures for the tool adapters: a sandbox over live HTTP, no sandbox at all, or a stand-in
external service (a real local server) answering what the sandbox never would."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sandbox.services import sandbox_reset


@pytest.fixture
def sandbox_url(live_server, settings) -> str:
    """A freshly reset sandbox served by live_server, where the adapters look for it.

    Needs @pytest.mark.django_db(transaction=True, databases=["default", "sandbox"]).
    """
    sandbox_reset()
    settings.SANDBOX_URL = live_server.url + "/sandbox/"
    return settings.SANDBOX_URL


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def unreachable_sandbox(settings, closed_port) -> str:
    """SANDBOX_URL pointing where connections are refused: nothing can be sent."""
    settings.SANDBOX_URL = f"http://127.0.0.1:{closed_port}/sandbox/"
    return settings.SANDBOX_URL


class Canned:
    """What the stand-in answers next: status, headers, body; and what it was sent."""

    def __init__(self) -> None:
        self.status = 200
        self.headers: dict[str, str] = {"Content-Type": "application/json"}
        self.body = b"{}"
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

    def answer(self, status: int, body: object, **headers: str) -> None:
        self.status = status
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.headers = {"Content-Type": "application/json", **headers}


@pytest.fixture
def external(settings) -> Iterator[Canned]:
    canned = Canned()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            canned.requests.append((self.command, self.path, dict(self.headers), body))
            self.send_response(canned.status)
            for name, value in canned.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(canned.body)))
            self.end_headers()
            self.wfile.write(canned.body)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    settings.SANDBOX_URL = f"http://127.0.0.1:{server.server_address[1]}/sandbox/"
    yield canned
    server.shutdown()
    server.server_close()
