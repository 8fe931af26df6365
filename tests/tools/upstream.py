"""A real local HTTP server for the connector's hostile-upstream tests: it records each raw
request line exactly as it arrived (before any parsing could normalize it) and answers
through a function the test chooses, which may stream, trickle or echo; and the connector
whose secret such an upstream echoes back, with the check for what leaked."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socketserver
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO
from urllib.parse import quote, quote_plus

Answer = Callable[[BinaryIO, str], None]


def json_answer(status: int, body: object) -> Answer:
    """An answer of one JSON body with its Content-Length."""
    data = json.dumps(body).encode()

    def answer(out: BinaryIO, request_line: str) -> None:
        out.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        )
        out.write(data)

    return answer


class Recording(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.request_lines: list[str] = []
        self.answer: Answer = json_answer(200, {})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(socketserver.StreamRequestHandler):
    server: Recording

    def handle(self) -> None:
        line = self.rfile.readline(65537).decode("latin-1").rstrip("\r\n")
        length = 0
        while True:
            header = self.rfile.readline(65537)
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        self.rfile.read(length)
        self.server.request_lines.append(line)
        # The client hanging up mid-answer is what a bounded reader does.
        with contextlib.suppress(OSError):
            self.server.answer(self.wfile, line)
            self.wfile.flush()


@contextlib.contextmanager
def recording_server() -> Iterator[Recording]:
    server = Recording()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# An upstream that echoes a connector's secret back, in each form it can travel in.
SECRET = "Tok en/+s3cr3t:9Zq"
ENCODINGS = {
    "literal": SECRET,
    "percent": quote(SECRET, safe=""),
    "percent-lower-hex": re.sub(
        r"%[0-9A-F]{2}", lambda hit: hit.group(0).lower(), quote(SECRET, safe="")
    ),
    "plus": quote_plus(SECRET),
    "url-path": quote(SECRET, safe="/+:"),
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "base64-urlsafe": base64.urlsafe_b64encode(SECRET.encode()).decode(),
    "basic-credentials": base64.b64encode(f"agent:{SECRET}".encode()).decode(),
    "json-escaped": json.dumps(SECRET)[1:-1].replace("/", "\\/"),
}
TOOL = """
[connectors.{connector}.tools.{label}]
contract_version = "v1"
effect_class = "{effect_class}"
path = "things/{{target}}"
receipt = {{ id = "/id" }}
target_schema = {{ type = "string" }}
args_schema = {{ type = "object", additionalProperties = false }}
"""


def write_and_lookup(connector: str) -> str:
    """Two tools of one endpoint: `write` (reconcilable) and `lookup` (read_only)."""
    return "".join(
        TOOL.format(connector=connector, label=label, effect_class=effect_class)
        for label, effect_class in (("write", "reconcilable"), ("lookup", "read_only"))
    )


ECHO_CONNECTOR = """
[connectors.echo]
kind = "http"
base_url = "http://localhost:${ECHO_PORT}/api/${ECHO_TOKEN}/"
headers = { Authorization = "Bearer ${ECHO_TOKEN}" }
""" + write_and_lookup("echo")


def echo_environ(server: Recording) -> dict[str, str]:
    return {"ECHO_PORT": str(server.server_address[1]), "ECHO_TOKEN": SECRET}


def echoing(status: int, encoding: str, server: Recording) -> Answer:
    """An answer with `status` whose body repeats the secret in `encoding` and the
    upstream's own addresses."""
    port = server.server_address[1]
    return json_answer(
        status,
        {
            "id": f"r-{ENCODINGS[encoding]}",
            "detail": f"refused {ENCODINGS[encoding]} at localhost:{port} (127.0.0.1), "
            f"see http://localhost:{port}/api/help",
            "seen_by": "localhost",
        },
    )


def leaks(text: str, server: Recording) -> list[str]:
    """Every form of the secret, and every address of the upstream, found in text."""
    found = [name for name, form in ENCODINGS.items() if form in text]
    port = str(server.server_address[1])
    found += [address for address in ("localhost", "127.0.0.1", port) if address in text]
    return found
