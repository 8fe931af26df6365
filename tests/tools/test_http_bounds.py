"""An upstream cannot make a worker hold its answer in memory or wait on it forever: at most
max_response_bytes of a body are read, and a call ends within its seconds even when the
server trickles bytes. Past either, a write's outcome is unknown and a read is transient."""

from __future__ import annotations

import resource
import time

import pytest

from runs.tools.connectors.fields import ConnectorError
from runs.tools.errors import ResultUncertain, TransientError
from runs.tools.testing import frozen_call
from tests.registry import connector_tools
from tests.tools.upstream import json_answer, recording_server, write_and_lookup

TIMEOUT = (2.0, 2.0)
MIB = 1024 * 1024

CONNECTOR = """
[connectors.big]
kind = "http"
base_url = "${{BIG_URL}}"
{limits}
"""


def tools(url: str, tmp_path, limits: str = "") -> dict:
    text = CONNECTOR.format(limits=limits) + write_and_lookup("big")
    loaded = connector_tools(tmp_path, text, environ={"BIG_URL": url + "/"})
    return {tool.name.removeprefix("big."): tool for tool in loaded}


def call(tool):
    return frozen_call(tool, "t-1", {}, key="run-1:a:t-1:v1")


def streaming(total: int, *, length: bool = True):
    """An answer of `total` bytes of one JSON string, written 64 KiB at a time."""
    chunk = b"x" * (64 * 1024)

    def answer(out, request_line: str) -> None:
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if length:
            head += f"Content-Length: {total}\r\n"
        out.write((head + "Connection: close\r\n\r\n").encode())
        out.write(b'{"id": "')
        sent = 8
        while sent < total - 2:
            part = chunk[: total - 2 - sent]
            out.write(part)
            sent += len(part)
        out.write(b'"}')

    return answer


def trickling(*, in_headers: bool):
    """An answer that never ends: one byte every 0.2 s, in its headers or its body."""

    def answer(out, request_line: str) -> None:
        out.write(b"HTTP/1.1 200 OK\r\n")
        if not in_headers:
            out.write(b"Content-Type: application/json\r\n\r\n")
        out.flush()
        for _ in range(600):
            out.write(b"X" if in_headers else b" ")
            out.flush()
            time.sleep(0.2)

    return answer


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until-close"])
def test_a_200_mib_answer_grows_the_worker_by_a_few_mb_and_a_write_is_uncertain(tmp_path, length):
    with recording_server() as server:
        server.answer = streaming(200 * MIB, length=length)
        tool = tools(server.url, tmp_path)["write"]
        before = peak_rss_bytes()
        with pytest.raises(ResultUncertain, match="larger than 1048576 bytes"):
            tool.execute(call(tool), timeout=TIMEOUT)
        grown = peak_rss_bytes() - before
    assert grown < 8 * MIB, f"the peak RSS grew by {grown / MIB:.1f} MiB"


def test_a_read_past_the_limit_is_transient(tmp_path):
    with recording_server() as server:
        server.answer = streaming(200 * MIB)
        tool = tools(server.url, tmp_path)["lookup"]
        with pytest.raises(TransientError, match="larger than 1048576 bytes"):
            tool.execute(call(tool), timeout=TIMEOUT)


def test_a_connector_sets_its_own_max_response_bytes(tmp_path):
    with recording_server() as server:
        tool = tools(server.url, tmp_path, "max_response_bytes = 100")["write"]
        server.answer = json_answer(200, {"id": "x" * 80})
        assert tool.execute(call(tool), timeout=TIMEOUT).receipt_id == "x" * 80
        server.answer = json_answer(200, {"id": "x" * 100})
        with pytest.raises(ResultUncertain, match="larger than 100 bytes"):
            tool.execute(call(tool), timeout=TIMEOUT)


@pytest.mark.parametrize("in_headers", [True, False], ids=["headers", "body"])
def test_a_trickling_server_holds_a_write_no_longer_than_its_seconds(tmp_path, in_headers):
    with recording_server() as server:
        server.answer = trickling(in_headers=in_headers)
        tool = tools(server.url, tmp_path, "max_call_seconds = 1.5")["write"]
        started = time.monotonic()
        with pytest.raises(ResultUncertain, match=r"within 1\.5 s"):
            tool.execute(call(tool), timeout=TIMEOUT)
        assert time.monotonic() - started < 2.5


def test_a_trickling_read_is_transient_within_connect_plus_read_seconds(tmp_path):
    with recording_server() as server:
        server.answer = trickling(in_headers=False)
        tool = tools(server.url, tmp_path)["lookup"]
        started = time.monotonic()
        with pytest.raises(TransientError, match="within 2 s"):
            tool.execute(call(tool), timeout=(1.0, 1.0))
        assert time.monotonic() - started < 3.0


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("max_response_bytes = 0", "max_response_bytes.*must be an integer >= 1"),
        ("max_response_bytes = 1.5", "max_response_bytes.*must be an integer >= 1"),
        ("max_call_seconds = 0", "max_call_seconds.*must be a number"),
    ],
)
def test_bad_limits_are_refused_when_loaded(tmp_path, limits, message):
    with pytest.raises(ConnectorError, match=message):
        tools("http://127.0.0.1:9", tmp_path, limits)
