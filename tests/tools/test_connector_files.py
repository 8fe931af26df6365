"""Connector files are refused with a message that names the file, connector, tool and field,
and a missing environment variable by its name; nothing half-loaded is ever used."""

from __future__ import annotations

import pytest

from control.foundation.canonical import intent_digest
from runs.tools.calls import ToolCall
from runs.tools.connectors.fields import ConnectorError
from runs.tools.connectors.files import load_files
from runs.tools.errors import InvalidArguments
from tests.registry import connector_tools

GOOD_TOOL = """
contract_version = "v1"
effect_class = "idempotent"
target_schema = { type = "string", maxLength = 64 }
path = "items/{target}"
idempotency_header = "Idempotency-Key"
receipt = { id = "{/id}" }
args_schema.type = "object"
args_schema.properties = { note = { type = "string" } }
args_schema.additionalProperties = false
"""


def desk(tool: str = GOOD_TOOL, connector: str = 'base_url = "https://desk.example/api"') -> str:
    return f'[connectors.desk]\nkind = "http"\n{connector}\n\n[connectors.desk.tools.close]\n{tool}'


def refusal(tmp_path, text: str, environ: dict | None = None) -> str:
    with pytest.raises(ConnectorError) as caught:
        connector_tools(tmp_path, text, environ=environ)
    return str(caught.value)


def test_a_good_file_defines_its_tools_under_the_connectors_name(tmp_path):
    [tool] = connector_tools(tmp_path, desk())
    assert (tool.name, tool.contract_version, tool.connector) == ("desk.close", "v1", "desk")
    assert (tool.dedupes_by_key, tool.queryable_by_key, tool.needs_approval) == (True, False, True)


def test_a_missing_environment_variable_is_named_with_its_place(tmp_path):
    text = desk(
        connector='base_url = "https://desk.example"\n'
        'headers = { Authorization = "Bearer ${DESK_TOKEN}" }'
    )
    message = refusal(tmp_path, text)
    assert "connector 'desk'" in message
    assert "field 'headers.Authorization'" in message
    assert "environment variable DESK_TOKEN is not set" in message


def test_dollar_dollar_writes_a_literal_dollar_brace(tmp_path):
    tool = GOOD_TOOL.replace('path = "items/{target}"', 'path = "items/$${{target}}"')
    [loaded] = connector_tools(tmp_path, desk(tool))
    assert loaded.request.path == "items/${{target}}"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            ('effect_class = "idempotent"', 'effect_class = "maybe"'),
            "effect_class",
            "must be one of",
        ),
        (('contract_version = "v1"', ""), "contract_version", "is required"),
        (("maxLength = 64", "format = 'uri'"), "target_schema", "unsupported keywords ['format']"),
        (("{target}", "{targt}"), "path", "unknown placeholder {targt}"),
        (('id = "{/id}"', 'id = "{args.color}"'), "receipt.id", "names no argument of args_schema"),
        (('id = "{/id}"', 'id = "{/a~2b}"'), "receipt.id", "bad ~ escape"),
        (("receipt =", 'colour = "red"\nreceipt ='), "colour", "is not a known field here"),
        (
            ('idempotency_header = "Idempotency-Key"', "idempotency_header = 7"),
            "idempotency_header",
            "non-empty string",
        ),
    ],
)
def test_each_bad_field_is_named_exactly(tmp_path, change, field, words):
    message = refusal(tmp_path, desk(GOOD_TOOL.replace(*change)))
    assert str(tmp_path / "connectors.toml") in message
    assert "connector 'desk', tool 'close'" in message
    assert f"field '{field}'" in message
    assert words in message


def test_an_unknown_kind_and_a_bad_base_url_are_refused(tmp_path):
    assert "must be one of" in refusal(tmp_path, desk().replace('kind = "http"', 'kind = "ftp"'))
    bad_url = desk(connector='base_url = "desk.example"')
    assert "field 'base_url': must start with http://" in refusal(tmp_path, bad_url)


def test_a_file_that_is_not_toml_or_defines_nothing_is_refused(tmp_path):
    assert "is not valid TOML" in refusal(tmp_path, "[connectors.desk\n")
    assert "defines no connector" in refusal(tmp_path, "[connectors]\n")
    assert "defines no tool" in refusal(
        tmp_path, '[connectors.desk]\nkind = "http"\nbase_url = "http://x"\ntools = {}\n'
    )


def test_the_same_tool_and_version_in_two_files_is_refused(tmp_path):
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text(desk())
    second.write_text(desk())
    with pytest.raises(ConnectorError, match=r"desk\.close v1 is defined twice"):
        load_files([str(first), str(second)], environ={})


def test_two_versions_of_one_tool_live_side_by_side(tmp_path):
    v2 = GOOD_TOOL.replace('"v1"', '"v2"')
    text = desk() + '\n[connectors.desk.tools.close_v2]\ntool = "close"\n' + v2
    tools = connector_tools(tmp_path, text)
    assert sorted((tool.name, tool.contract_version) for tool in tools) == [
        ("desk.close", "v1"),
        ("desk.close", "v2"),
    ]
    assert tools[0].definition_digest() != tools[1].definition_digest()


def test_the_frozen_meaning_leaves_out_connection_and_retry_but_not_the_request(tmp_path):
    [base] = connector_tools(tmp_path, desk())
    moved = desk(
        GOOD_TOOL + "retry = { max_attempts = { transient = 2 } }\n",
        connector='base_url = "https://elsewhere.example/v2"\ntimeout = [1, 2]',
    )
    [elsewhere] = connector_tools(tmp_path, moved)
    assert elsewhere.definition_digest() == base.definition_digest()
    [other_path] = connector_tools(tmp_path, desk(GOOD_TOOL.replace("items/", "things/")))
    assert other_path.definition_digest() != base.definition_digest()


def test_a_python_connector_names_a_tool_class_of_that_name(tmp_path):
    text = (
        '[connectors.bench]\nkind = "python"\n'
        '[connectors.bench.tools.noop]\nclass = "bench.tools.BenchNoop"\n'
    )
    [tool] = connector_tools(tmp_path, text)
    assert tool.name == "bench.noop"
    wrong = text.replace("tools.noop]", "tools.nothing]")
    assert "is named 'bench.noop', not 'bench.nothing'" in refusal(tmp_path, wrong)
    missing = text.replace("BenchNoop", "Missing")
    assert "field 'class': cannot be imported" in refusal(tmp_path, missing)


def test_a_connectors_concurrency_reaches_its_tools_and_is_bounded(tmp_path):
    [tool] = connector_tools(
        tmp_path, desk(connector='base_url = "https://desk.example/api"\nconcurrency = 8')
    )
    assert tool.concurrency == 8
    [default] = connector_tools(tmp_path, desk())
    assert default.concurrency == 1
    for value, words in (("0", "must be an integer >= 1"), ("65", "must be at most 64")):
        text = desk(connector=f'base_url = "https://desk.example/api"\nconcurrency = {value}')
        assert f"field 'concurrency': {words}" in refusal(tmp_path, text)


def test_a_whole_variable_in_a_typed_field_reads_as_its_type(tmp_path):
    text = desk(
        GOOD_TOOL + 'needs_approval = "${DESK_APPROVAL}"\nretry.base_delay = "${DESK_DELAY}"',
        connector='base_url = "https://desk.example/api"\nconcurrency = "${DESK_CONCURRENCY}"',
    )
    environ = {"DESK_APPROVAL": "false", "DESK_DELAY": "0.25", "DESK_CONCURRENCY": "8"}

    [tool] = connector_tools(tmp_path, text, environ=environ)

    assert (tool.needs_approval, tool.concurrency) == (False, 8)
    assert tool.retry_policy.base_delay == 0.25


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("eight", "must be an integer; ${DESK_CONCURRENCY} does not read as one"),
        ("8.0", "must be an integer; ${DESK_CONCURRENCY} does not read as one"),
        (" 8", "must be an integer; ${DESK_CONCURRENCY} does not read as one"),
        ("0", "must be an integer >= 1"),
    ],
)
def test_a_variable_that_does_not_read_as_the_type_is_refused_by_name(tmp_path, value, words):
    text = desk(
        connector='base_url = "https://desk.example/api"\nconcurrency = "${DESK_CONCURRENCY}"'
    )

    message = refusal(tmp_path, text, environ={"DESK_CONCURRENCY": value})

    assert f"field 'concurrency': {words}" in message
    if value != "0":
        assert repr(value) not in message  # the value may be a secret: only its name is said


def test_a_variable_inside_a_longer_text_stays_text(tmp_path):
    text = desk(connector='base_url = "https://desk.example/api"\nconcurrency = "${A}${B}"')
    message = refusal(tmp_path, text, environ={"A": "1", "B": "6"})
    assert "field 'concurrency': must be an integer >= 1" in message


TAGGED_TOOL = GOOD_TOOL.replace(
    'args_schema.properties = { note = { type = "string" } }',
    'args_schema.properties = { tags = { type = "array", uniqueItems = true, '
    'items = { type = "string", minLength = 1 } }, note = { type = "integer" } }',
)


def test_normalize_steps_spell_every_string_of_an_array(tmp_path):
    text = desk(TAGGED_TOOL + 'normalize = { args = { tags = ["strip", "lower"] } }')
    [tool] = connector_tools(tmp_path, text)

    _, args = tool.normalize(target="t-1", args={"tags": [" Urgent", "billing "]})

    assert args == {"tags": ["urgent", "billing"]}
    # Spelled alike, two items are one: the normalized intent repeats an item, refused.
    with pytest.raises(InvalidArguments, match=r"args\.tags\[1\] repeats args\.tags\[0\]"):
        tool.normalize(target="t-1", args={"tags": ["Urgent", "urgent "]})


def test_normalize_steps_are_refused_for_what_is_not_text(tmp_path):
    text = desk(TAGGED_TOOL + 'normalize = { args = { note = ["strip"] } }')
    message = refusal(tmp_path, text)
    assert "field 'normalize.args.note': normalizes only a string argument" in message


def test_only_http_and_smtp_connectors_send_calls_at_once(tmp_path):
    text = (
        '[connectors.git]\nkind = "mcp"\ncommand = ["mcp-server-git"]\nconcurrency = 2\n\n'
        '[connectors.git.tools.commit]\ncontract_version = "v1"\neffect_class = "reconcilable"\n'
    )
    assert "only http and smtp connectors send calls at once" in refusal(tmp_path, text)


def test_a_body_encoding_is_one_the_http_kind_knows_and_fits_its_body(tmp_path):
    assert "field 'body_encoding': must be one of json, form, text, not 'xml'" in refusal(
        tmp_path, desk(GOOD_TOOL + 'body_encoding = "xml"\nbody = { note = "{args.note}" }\n')
    )
    assert "field 'body': must be a table to be sent as a form" in refusal(
        tmp_path, desk(GOOD_TOOL + 'body_encoding = "form"\nbody = "{args.note}"\n')
    )
    assert "field 'body': must be a string template to be sent as text" in refusal(
        tmp_path, desk(GOOD_TOOL + 'body_encoding = "text"\nbody = { note = "{args.note}" }\n')
    )
    [form] = connector_tools(
        tmp_path, desk(GOOD_TOOL + 'body_encoding = "form"\nbody = { note = "{args.note}" }\n')
    )
    [as_json] = connector_tools(tmp_path, desk(GOOD_TOOL + 'body = { note = "{args.note}" }\n'))
    # How the body is sent is part of what the tool means: another encoding, another digest.
    assert form.definition_digest() != as_json.definition_digest()


@pytest.mark.parametrize(
    ("encoding", "body", "sent", "content_type"),
    [
        ("", '{ note = "{args.note}" }', b'{"note":"a&b"}', "application/merge-patch+json"),
        ('"form"', '{ note = "{args.note}" }', b"note=a%26b", "application/x-www-form-urlencoded"),
        ('"text"', '"Note: {args.note}"', b"Note: a&b", "text/plain; charset=utf-8"),
    ],
)
def test_each_body_encoding_sends_its_bytes_and_content_type(
    tmp_path, settings, external, encoding, body, sent, content_type
):
    # The connector names a JSON type of its own: JSON keeps it, form and text set theirs.
    connector = 'base_url = "${BASE}"\nheaders = { Content-Type = "application/merge-patch+json" }'
    declared = (f"body_encoding = {encoding}\n" if encoding else "") + f"body = {body}\n"
    [tool] = connector_tools(
        tmp_path, desk(GOOD_TOOL + declared, connector), environ={"BASE": settings.SANDBOX_URL}
    )
    external.answer(200, {"id": "r-1"})
    target, args = tool.normalize(target="t-1", args={"note": "a&b"})
    tool.execute(
        ToolCall(
            tool=tool.name,
            target=target,
            args=args,
            idempotency_key="k-1",
            intent_digest=intent_digest(tool=tool.name, target=target, args=args),
        ),
        timeout=(2.0, 5.0),
    )
    [(_, _, headers, received)] = external.requests
    assert received == sent
    assert headers["Content-Type"] == content_type
