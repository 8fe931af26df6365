"""A real local HTTP server for the connector's hostile-upstream tests: it records each raw
request line exactly as it arrived (before any parsing could normalize it) and answers
through a function the test chooses, which may stream, trickle or echo."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

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
