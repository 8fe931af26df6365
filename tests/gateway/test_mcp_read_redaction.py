"""The MCP gateway's read path uses the same redaction as every stored error: a read-only
tool's answer and its error carry none of the connector's secrets, in any encoding, and not
the upstream's address, even when the upstream echoes them back."""

from __future__ import annotations

import json

import pytest

from tests.gateway.conftest import call
from tests.registry import connector_tools, registered
from tests.tools.upstream import (
    ECHO_CONNECTOR,
    ENCODINGS,
    echo_environ,
    echoing,
    json_answer,
    leaks,
    recording_server,
)


def read_over_mcp(caller, tmp_path, server):
    _, lookup = connector_tools(tmp_path, ECHO_CONNECTOR, environ=echo_environ(server))
    with registered(lookup):
        return call(caller, lookup.name, {"target": "t-1"})


def shown(result) -> str:
    return json.dumps(result.structured_content) + str(result.content)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_reads_answer_echoing_the_secret_and_the_upstream_shows_neither(
    caller, tmp_path, encoding
):
    with recording_server() as server:
        port = server.server_address[1]
        form = ENCODINGS[encoding]
        server.answer = json_answer(
            200,
            {
                "id": f"r-{form}",
                "note": f"token {form} seen by localhost:{port}",
                "self": f"http://localhost:{port}/api/things/t-1",
                "link": "https://tickets.example.com/t-1",
            },
        )
        result = read_over_mcp(caller, tmp_path, server)
        assert not result.is_error
        answer = result.structured_content["result"]
        assert leaks(shown(result), server) == []
        # A URL of another system is the answer's data, and stays.
        assert answer["link"] == "https://tickets.example.com/t-1"
        assert "${ECHO_TOKEN}" in answer["note"]


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_reads_error_echoing_the_secret_and_the_upstream_shows_neither(
    caller, tmp_path, encoding
):
    with recording_server() as server:
        server.answer = echoing(500, encoding, server)
        result = read_over_mcp(caller, tmp_path, server)
        assert result.is_error
        assert "could not read 't-1'" in shown(result)
        assert leaks(shown(result), server) == []
