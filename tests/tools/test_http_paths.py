"""A path template never leaves its base path: whatever an agent puts in a target or an
argument (dot segments, `?`, `#`, `%2e`, encoded slashes, Unicode, a URL of its own) becomes
exactly one percent-encoded path segment under the connector's base URL, or the call is
refused before anything is sent. Checked on the raw request lines a real server received."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.tools.connectors.fields import ConnectorError
from runs.tools.errors import InvalidArguments
from runs.tools.testing import frozen_call
from tests.registry import connector_tools
from tests.tools.upstream import json_answer, recording_server

TIMEOUT = (2.0, 2.0)
BASE_PATH = "/base/v1/"
DOT_SEGMENTS = ("", ".", "..")
# Each tool's path template, and the segments it makes under the base path.
TEMPLATES = {
    "whole": ("{target}", 1),
    "inside": ("items/{target}/close", 3),
    "args": ("{args.a}/x-{args.b}", 2),
    "read": ("things/{target}", 2),
}

CONNECTOR = """
[connectors.paths]
kind = "http"
base_url = "${PATHS_URL}"
"""
TOOL = """
[connectors.paths.tools.{label}]
contract_version = "v1"
effect_class = "{effect_class}"
path = "{path}"
receipt = {{ id = "fixed" }}
target_schema = {{ type = "string" }}

[connectors.paths.tools.{label}.args_schema]
type = "object"
properties = {{ a = {{ type = "string" }}, b = {{ type = "string" }} }}
additionalProperties = false
"""

HOSTILE = [
    ".",
    "..",
    "?",
    "#",
    "%2e",
    "%2E%2e",
    "%2f",
    "%2F..%2F",
    "/",
    "\\",
    "?x=1",
    "#frag",
    "../..",
    "..;",
    "é",
    "\u202e",
    "\u2024\u2024",
    "//evil.example",
    "http://evil.example/",
    "@evil.example",
    ":8080",
    ";",
    "&",
    "=",
    "%",
    "+",
]
hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4)), min_size=1, max_size=5).map(
        "".join
    ),
)


def tools(url: str, tmp_path) -> dict:
    text = CONNECTOR + "".join(
        TOOL.format(
            label=label,
            path=path,
            effect_class="read_only" if label == "read" else "reconcilable",
        )
        for label, (path, _) in TEMPLATES.items()
    )
    loaded = connector_tools(tmp_path, text, environ={"PATHS_URL": url + BASE_PATH})
    return {tool.name.removeprefix("paths."): tool for tool in loaded}


def assert_under_base(request_line: str, segments: int) -> None:
    _method, target, version = request_line.split(" ")
    assert version == "HTTP/1.1"
    parts = urlsplit(target)
    assert (parts.scheme, parts.netloc, parts.query, parts.fragment) == ("", "", "", "")
    assert target.startswith(BASE_PATH), request_line
    rest = target[len(BASE_PATH) :].split("/")
    assert len(rest) == segments, request_line
    assert not {".", ".."} & set(rest), request_line
    assert "?" not in target
    assert "#" not in target


def test_hostile_targets_and_args_stay_one_encoded_segment_under_the_base_path(tmp_path):
    with recording_server() as server:
        server.answer = json_answer(200, {"ok": True})
        by_label = tools(server.url, tmp_path)

        @settings(max_examples=300, deadline=None)
        @given(
            label=st.sampled_from(sorted(TEMPLATES)),
            target=hostile_text,
            a=hostile_text,
            b=hostile_text,
        )
        def one_call(label, target, a, b):
            tool = by_label[label]
            args = {"a": a, "b": b} if label == "args" else {}
            server.request_lines.clear()
            values = {"target": target.strip(), "args.a": a, "args.b": b}
            refusing = [name for name, value in values.items() if value in DOT_SEGMENTS]
            if label in ("whole", "inside", "read") and values["target"] in DOT_SEGMENTS:
                refusing = ["target"]
            elif label != "args" or not {"args.a", "args.b"} & set(refusing):
                refusing = []
            if refusing:
                # Refused when proposed: only an empty or dot segment is, naming its field.
                with pytest.raises(InvalidArguments) as refused:
                    frozen_call(tool, target, args, key="run-1:a:t:v1")
                assert refused.value.field in refusing
                assert server.request_lines == []
                return
            call = frozen_call(tool, target, args, key="run-1:a:t:v1")
            tool.execute(call, timeout=TIMEOUT)
            [line] = server.request_lines
            assert_under_base(line, TEMPLATES[label][1])

        one_call()


@pytest.mark.parametrize("value", [".", "..", " .. "])
@pytest.mark.parametrize("label", ["whole", "inside", "read"])
def test_a_dot_segment_is_refused_before_anything_is_sent(tmp_path, label, value):
    with recording_server() as server:
        tool = tools(server.url, tmp_path)[label]
        with pytest.raises(InvalidArguments, match=r"cannot be empty, \. or \.\.") as refused:
            frozen_call(tool, value, {}, key="run-1:a:t:v1")
        assert refused.value.field == "target"
        assert server.request_lines == []


def test_a_path_that_is_one_placeholder_is_encoded_too(tmp_path):
    with recording_server() as server:
        tool = tools(server.url, tmp_path)["whole"]
        tool.execute(frozen_call(tool, "a/b?c#d", {}, key="run-1:a:t:v1"), timeout=TIMEOUT)
        assert server.request_lines == ["POST /base/v1/a%2Fb%3Fc%23d HTTP/1.1"]


def test_a_path_template_with_a_query_fragment_or_dot_segment_is_refused_when_loaded(tmp_path):
    for path, why in [
        ("items?x={target}", "params"),
        ("items#{target}", "params"),
        ("../{target}", "dot segment"),
        ("https://elsewhere/{target}", "relative"),
    ]:
        text = CONNECTOR + TOOL.format(label="bad", path=path, effect_class="reconcilable")
        with pytest.raises(ConnectorError, match=why):
            connector_tools(tmp_path, text, environ={"PATHS_URL": "http://127.0.0.1:9/b/"})


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:9/b/?key=1", "http://127.0.0.1:9/b/#x"])
def test_a_base_url_with_a_query_or_fragment_is_refused_when_loaded(tmp_path, base_url):
    text = CONNECTOR + TOOL.format(label="t", path="{target}", effect_class="reconcilable")
    with pytest.raises(ConnectorError, match=r"base_url.*cannot hold a query or fragment"):
        connector_tools(tmp_path, text, environ={"PATHS_URL": base_url})
