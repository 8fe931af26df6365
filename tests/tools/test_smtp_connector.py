"""The smtp kind against a real SMTP server (aiosmtpd): its definition errors, the one message
a call sends, and how each failure is classified by whether the message content went out."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from control.foundation.canonical import content_hash
from runs.tools.calls import ToolCall
from runs.tools.connectors.fields import ConnectorError
from runs.tools.errors import (
    BusinessRejection,
    InvalidArguments,
    PermissionDenied,
    ResultUncertain,
    TransientError,
)
from runs.tools.testing import frozen_call
from tests.registry import connector_tools
from tests.smtp import (
    FROM_ADDRESS,
    PASSWORD,
    Mailbox,
    authenticator,
    connector_file,
    smtp_server,
)

TIMEOUT = (2.0, 2.0)
KEY = "run-1:notify-ops:ops@example.com:v1"
# The documented rule, written out here so that a change to it fails this test.
MESSAGE_ID = f"<{hashlib.sha256(KEY.encode()).hexdigest()[:40]}@example.test>"
ARGS = {"subject": "Disk at 91% on db-2", "body": "Hello,\n.\nthe line above is a lone dot."}


def send_tool(tmp_path, port: int = 1, **options):
    environ = {"SMTP_PASSWORD": options.pop("password", PASSWORD)}
    [tool] = connector_tools(tmp_path, connector_file(port, **options), environ=environ)
    return tool


def call_for(tool, target: str = " Ops@Example.com ", args: dict | None = None) -> ToolCall:
    return frozen_call(tool, target, args or ARGS, key=KEY)


def definition_error(tmp_path, text: str) -> str:
    with pytest.raises(ConnectorError) as caught:
        connector_tools(tmp_path, text, environ={"SMTP_PASSWORD": PASSWORD})
    return str(caught.value).split(", ", 1)[1]  # without the temporary file's path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            f'from_address = "{FROM_ADDRESS}"\n',
            "",
            "connector 'mail', field 'from_address': is required",
        ),
        (
            'tls = "none"',
            'tls = "ssl"',
            "connector 'mail', field 'tls': must be one of none, starttls, tls, not 'ssl'",
        ),
        (
            'subject = "{args.subject}"',
            'subject = "{args.subject} for {recipient}"',
            "connector 'mail', tool 'send', field 'subject': unknown placeholder {recipient}",
        ),
        (
            'body = "{args.body}"',
            'body = "{args.text}"',
            "connector 'mail', tool 'send', field 'body': {args.text} names no argument of "
            "args_schema",
        ),
        (
            'required = ["subject", "body"]',
            'required = ["subject"]',
            "connector 'mail', tool 'send', field 'body': {args.body} names an optional "
            "argument; the message needs it",
        ),
        (
            'effect_class = "not_retriable"',
            'effect_class = "idempotent"',
            "connector 'mail', tool 'send', field 'effect_class': an smtp tool is "
            "not_retriable: a resend is a second message",
        ),
        (
            f'"{FROM_ADDRESS}"',
            '"Countersign <countersign@example.test>"',
            "connector 'mail', field 'from_address': is not an address: Invalid addr_spec; "
            "only 'Countersign ' could be parsed from 'Countersign <countersign@example.test>'",
        ),
        (
            "timeout = 5",
            'timeout = 5\nusername = "countersign"',
            "connector 'mail', field 'password': username and password go together",
        ),
    ],
)
def test_a_definition_error_names_its_place_and_problem(tmp_path, old, new, expected):
    text = connector_file(25)
    assert old in text
    assert definition_error(tmp_path, text.replace(old, new, 1)) == expected


def test_an_smtp_tool_declares_a_resend_a_second_message_and_no_query(tmp_path):
    tool = send_tool(tmp_path)
    described = tool.describe()
    assert (described["kind"], described["effect_class"]) == ("smtp", "not_retriable")
    assert (tool.dedupes_by_key, tool.queryable_by_key, tool.echoes_digest) == (False,) * 3
    assert not tool.retry_after_uncertain_allowed
    assert "a resend is a second effect" in described["capabilities"]
    assert tool.retry_policy.call_timeout == (5.0, 5.0)  # the connection's timeout


def test_one_execute_delivers_one_message_named_by_the_key(tmp_path):
    mailbox = Mailbox(reply="250 2.0.0 Ok: queued as 4F2A")
    with smtp_server(mailbox) as port:
        tool = send_tool(tmp_path, port)
        call = call_for(tool, args={**ARGS, "subject": "Ünïcode ✓"})
        receipt = tool.execute(call, timeout=TIMEOUT)

    [message] = mailbox.messages
    assert mailbox.envelopes == [(FROM_ADDRESS, ["ops@example.com"])]
    assert message["Message-ID"] == MESSAGE_ID
    # Folded onto a second line (it passes 78 characters); the parser keeps the fold's space.
    assert message["X-Countersign-Intent"].lstrip() == call.intent_digest
    assert (message["From"], message["To"]) == (FROM_ADDRESS, "ops@example.com")
    assert message["Subject"] == "Ünïcode ✓"
    assert message.get_content() == ARGS["body"] + "\n"  # dot-stuffed on the wire, intact here
    assert receipt.to_dict() == {
        "idempotency_key": KEY,
        "intent_digest": call.intent_digest,
        "receipt_id": MESSAGE_ID,
        "target_version": None,
        "status": "accepted",
        "raw_response_hash": content_hash(b"250 2.0.0 Ok: queued as 4F2A"),
    }


def test_a_port_from_the_environment_reaches_the_real_server(tmp_path):
    """port = "${SMTP_PORT}", as a compose file passes it: read as the integer it spells."""
    mailbox = Mailbox(reply="250 2.0.0 Ok: queued as 4F2A")
    with smtp_server(mailbox) as port:
        text = connector_file(port).replace(f"port = {port}", 'port = "${SMTP_PORT}"')
        [tool] = connector_tools(tmp_path, text, environ={"SMTP_PORT": str(port)})
        tool.execute(call_for(tool), timeout=TIMEOUT)

    assert mailbox.envelopes == [(FROM_ADDRESS, ["ops@example.com"])]


def test_a_server_that_refuses_the_connection_is_transient(tmp_path, closed_port):
    tool = send_tool(tmp_path, closed_port)
    with pytest.raises(TransientError, match="nothing was sent: the connection failed") as caught:
        tool.execute(call_for(tool), timeout=TIMEOUT)
    assert not tool.outcome_unknown_after(caught.value)  # the worker may send it again


@pytest.mark.parametrize(
    ("mailbox", "timeout"),
    [(Mailbox(cut=True), 5), (Mailbox(delay=0.6), 0.3)],
    ids=["cut after the message", "silent past the timeout"],
)
def test_a_failure_after_the_message_went_out_is_uncertain(tmp_path, mailbox, timeout):
    with smtp_server(mailbox) as port:
        tool = send_tool(tmp_path, port, timeout=timeout)
        with pytest.raises(ResultUncertain, match="may have been delivered") as caught:
            tool.execute(call_for(tool), timeout=(timeout, timeout))

    assert mailbox.message_ids() == [MESSAGE_ID]  # it did arrive, exactly once
    assert MESSAGE_ID in caught.value.message  # what a person searches the mailbox for
    assert tool.outcome_unknown_after(caught.value)


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [("554 5.7.1 message looks like spam", BusinessRejection), ("451 4.3.0 try later", None)],
)
def test_an_answer_to_the_end_of_the_message_is_final_only_when_permanent(
    tmp_path, reply, error_class
):
    mailbox = Mailbox(reply=reply)
    with smtp_server(mailbox) as port:
        tool = send_tool(tmp_path, port)
        with pytest.raises(error_class or ResultUncertain, match=reply) as caught:
            tool.execute(call_for(tool), timeout=TIMEOUT)

    assert len(mailbox.messages) == 1
    if error_class is None:  # "try later" after the whole message: never sent again blindly
        assert tool.outcome_unknown_after(caught.value)
        assert caught.value.raw_response_hash == content_hash(reply.encode())
    else:
        assert not tool.outcome_unknown_after(caught.value)


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        ("550 5.1.1 no such mailbox", BusinessRejection),
        ("553 5.1.3 bad recipient address syntax", InvalidArguments),
        ("450 4.2.0 greylisted, come back later", TransientError),
    ],
)
def test_a_refused_recipient_sends_nothing(tmp_path, reply, error_class):
    mailbox = Mailbox(rcpt_reply=reply)
    with smtp_server(mailbox) as port:
        tool = send_tool(tmp_path, port)
        with pytest.raises(error_class, match=f"nothing was sent: RCPT TO was answered {reply}"):
            tool.execute(call_for(tool), timeout=TIMEOUT)
    assert mailbox.messages == []


def test_credentials_log_in_and_a_refused_login_is_permission_denied_without_the_password(
    tmp_path,
):
    mailbox = Mailbox()
    with smtp_server(mailbox, authenticator=authenticator, auth_require_tls=False) as port:
        (tmp_path / "good").mkdir()
        good = send_tool(tmp_path / "good", port, credentials=True)
        good.execute(call_for(good), timeout=TIMEOUT)
        wrong_password = "wrong-" + PASSWORD
        bad = send_tool(tmp_path, port, credentials=True, password=wrong_password)
        with pytest.raises(PermissionDenied) as caught:
            bad.execute(call_for(bad), timeout=TIMEOUT)

    assert mailbox.message_ids() == [MESSAGE_ID]  # the good login's message, and only it
    # The server repeated the password it was given; the error names the variable instead.
    assert caught.value.message == (
        "nothing was sent: AUTH was answered 535 5.7.8 countersign/${SMTP_PASSWORD} is not known"
    )
    assert wrong_password not in str(caught.value)
    assert wrong_password not in repr(caught.value.args)


@pytest.mark.parametrize(
    ("tls", "expected"),
    [("starttls", "STARTTLS failed"), ("tls", "the connection failed: .*SSL")],
)
def test_a_connection_that_cannot_be_secured_sends_nothing_and_is_transient(
    tmp_path, tls, expected
):
    mailbox = Mailbox()  # a server that speaks only plain SMTP
    with smtp_server(mailbox) as port:
        tool = send_tool(tmp_path, port, tls=tls)
        with pytest.raises(TransientError, match=f"nothing was sent: {expected}"):
            tool.execute(call_for(tool), timeout=TIMEOUT)
    assert mailbox.messages == []


@pytest.mark.parametrize(
    "target",
    ["Ops <ops@example.com>", "ops@example.com, all@example.com", "ops@", "ünï@example.com"],
)
def test_a_recipient_is_one_plain_address_or_the_proposal_is_invalid(tmp_path, target):
    tool = send_tool(tmp_path)
    with pytest.raises(InvalidArguments, match="the recipient") as caught:
        tool.normalize(target=target, args=ARGS)
    assert caught.value.field == "target"


def test_a_header_smuggled_into_the_subject_is_invalid_before_connecting(tmp_path, closed_port):
    tool = send_tool(tmp_path, closed_port)  # a connection attempt would be transient
    call = call_for(tool, args={**ARGS, "subject": "hi\r\nBcc: everyone@example.com"})
    with pytest.raises(InvalidArguments, match="linefeed or carriage return") as caught:
        tool.execute(call, timeout=TIMEOUT)
    assert caught.value.field == "args"


def test_the_documented_example_file_loads_and_takes_the_documented_proposal(tmp_path):
    document = (Path(__file__).resolve().parents[2] / "docs" / "CONNECTORS.md").read_text()
    section = document.split("## The smtp kind", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    environ = {"SMTP_USERNAME": "countersign", "SMTP_PASSWORD": PASSWORD}
    [tool] = connector_tools(tmp_path, example, environ=environ)
    args = {"severity": "warning", "subject": "Disk at 91% on db-2", "body": "Make room."}
    assert tool.name == "mail.send"
    assert tool.normalize(target="Ops@Example.com", args=args) == ("ops@example.com", args)
