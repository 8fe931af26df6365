"""The `smtp` kind: tools that send one mail message through an SMTP server (stdlib smtplib).

Connection fields: host, port (default 25, 587 or 465 by tls), tls ("none", "starttls",
"tls"; default "starttls"), username and password (both or neither; normally `${VAR}`s),
from_address, timeout (seconds for the connection and each reply; default: the tool's
retry call_timeout).

Tool fields beyond the common ones: subject and body, text templates over the call
(`{args.NAME}`, `{target}`, ...). The target is the recipient address. effect_class must be
not_retriable: the server keeps no keys, so a resend is a second message.

The message's Message-ID comes from the idempotency key (`message_id`), so a person can find
the one message a key sent; the X-Countersign-Intent header carries the intent digest as
evidence. The client drives the protocol step by step (smtplib's sendmail hides where it
failed) so that it knows whether the message content went out: before that, no failure can
have delivered it; after it, only a 2xx or a 5xx answer settles the outcome. The table is in
docs/CONNECTORS.md, "The smtp kind".
"""

from __future__ import annotations

import contextlib
import email.errors
import email.policy
import hashlib
import re
import smtplib
import ssl
from dataclasses import dataclass, replace
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from control.foundation.canonical import content_hash
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.connectors.definition import ConnectorSpec, ToolSpec, check_template, tool_spec
from runs.tools.connectors.fields import Fields
from runs.tools.connectors.templates import (
    Lookup,
    TemplateError,
    is_absent,
    lookup_of,
    placeholders,
    render,
)
from runs.tools.connectors.tool import ConnectorTool
from runs.tools.errors import (
    BusinessRejection,
    InvalidArguments,
    PermissionDenied,
    ResultUncertain,
    ToolError,
    TransientError,
)
from runs.tools.retry import RetryPolicy

TLS_MODES = ("none", "starttls", "tls")
DEFAULT_PORTS = {"none": 25, "starttls": 587, "tls": 465}
INTENT_HEADER = "X-Countersign-Intent"
# Headers RFC 2047-encoded and bodies quoted-printable or base64: the message is 7-bit ASCII
# and needs neither 8BITMIME nor SMTPUTF8 from the server.
_POLICY = email.policy.SMTP.clone(cte_type="7bit")
_RECEIPT_ID_LIMIT = 200
# RCPT refusals that say the address itself is malformed, not that the server refuses it.
_MALFORMED_ADDRESS = (501, 553)
_MECHANISMS = {"CRAM-MD5", "PLAIN", "LOGIN"}
_STEPS = {
    "connect": "the connection",
    "ehlo": "EHLO",
    "starttls": "STARTTLS",
    "auth": "AUTH",
    "mail": "MAIL FROM",
    "rcpt": "RCPT TO",
    "data": "DATA",
}


def message_id(idempotency_key: str, domain: str) -> str:
    """The Message-ID of the one message sent under idempotency_key: `<`, the first 40 hex
    digits of the key's SHA-256, `@`, the from address's domain, `>`."""
    return f"<{hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]}@{domain}>"


def address_problem(text: str) -> str | None:
    """Why text is not one plain ASCII address (local@domain), or None."""
    if not text.isascii():
        return "must be an ASCII address (SMTPUTF8 is not supported)"
    try:
        address = Address(addr_spec=text)
    except (ValueError, email.errors.MessageError) as error:
        return f"is not an address: {error}"
    if not address.domain or address.addr_spec != text:
        return "must be one plain address such as ops@example.com"
    return None


@dataclass(frozen=True)
class Connection:
    host: str
    port: int
    tls: str
    username: str | None
    password: str | None
    from_address: str
    timeout: float | None

    @property
    def domain(self) -> str:
        return self.from_address.rpartition("@")[2]


def connection(spec: ConnectorSpec, fields: Fields) -> Any:
    tls = fields.string("tls", "starttls", choices=TLS_MODES)
    from_address = fields.string("from_address")
    problem = address_problem(from_address)
    if problem is not None:
        raise fields.error("from_address", problem)
    username = fields.string("username", None)
    password = fields.string("password", None)
    if (username is None) != (password is None):
        raise fields.error(
            "password" if username else "username", "username and password go together"
        )
    for name, value in (("username", username), ("password", password)):
        if value is not None and not value.isascii():
            raise fields.error(name, "must be ASCII (SMTP AUTH sends it as ASCII)")
    timeout = fields.number("timeout", None)
    if timeout is not None and timeout <= 0:
        raise fields.error("timeout", "must be a number > 0")
    spec.secrets.hosts.add(fields.string("host"))
    shared = Connection(
        host=fields.string("host"),
        port=fields.integer("port", DEFAULT_PORTS[tls], minimum=1),
        tls=tls,
        username=username,
        password=password,
        from_address=from_address,
        timeout=timeout,
    )
    if len(message_id("", shared.domain)) > _RECEIPT_ID_LIMIT:
        raise fields.error("from_address", "its domain is too long for a Message-ID receipt")

    def build(label: str, tool_fields: Fields, raw: dict[str, Any]) -> SmtpTool:
        return SmtpTool(tool_spec(spec, label, tool_fields, raw), tool_fields, shared)

    return build


def _text_template(fields: Fields, name: str, spec: ToolSpec) -> str:
    template = fields.string(name)
    check_template(fields, name, template, spec.args_schema)
    required = spec.args_schema.get("required", [])
    for placeholder in placeholders(template):
        argument = placeholder.split(".")[1] if placeholder.startswith("args.") else None
        if argument is not None and argument not in required:
            raise fields.error(
                name, f"{{{placeholder}}} names an optional argument; the message needs it"
            )
    return template


class SmtpTool(ConnectorTool):
    kind = "smtp"

    def __init__(self, spec: ToolSpec, fields: Fields, connection: Connection) -> None:
        if spec.effect_class != "not_retriable":
            raise fields.error(
                "effect_class", "an smtp tool is not_retriable: a resend is a second message"
            )
        if spec.satisfied_when is not None:
            raise fields.error("satisfied_when", "an smtp tool has no read to be satisfied by")
        self.connection = connection
        self.subject = _text_template(fields, "subject", spec)
        self.body = _text_template(fields, "body", spec)
        if connection.timeout is not None:
            spec = replace(
                spec,
                retry_policy=replace(
                    spec.retry_policy or RetryPolicy(),
                    call_timeout=(connection.timeout, connection.timeout),
                ),
            )
        super().__init__(spec, dedupes_by_key=False, queryable_by_key=False, echoes_digest=False)

    def capabilities(self) -> list[str]:
        return [*super().capabilities(), "the Message-ID comes from the key: find it in a mailbox"]

    def normalize(self, *, target: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        normal_target, normal_args = super().normalize(target=target, args=args)
        problem = address_problem(normal_target)
        if problem is not None:
            raise InvalidArguments(f"the recipient {problem}", field="target")
        return normal_target, normal_args

    def perform(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        sent_id = message_id(call.idempotency_key, self.connection.domain)
        content = self._content(call, sent_id)
        code, reply = Session(self.connection, timeout, sent_id).deliver(call.target, content)
        return ToolReceipt(
            idempotency_key=call.idempotency_key,
            intent_digest=call.intent_digest,
            receipt_id=sent_id,
            target_version=None,
            status="accepted",
            raw_response_hash=content_hash(_reply_bytes(code, reply)),
        )

    def _content(self, call: ToolCall, sent_id: str) -> bytes:
        """The message as sent after DATA: dot-stuffed and ended by the lone dot."""
        lookup = lookup_of(call)
        message = EmailMessage(policy=_POLICY)
        try:
            message["Message-ID"] = sent_id
            message["Date"] = formatdate(usegmt=True)
            message["From"] = self.connection.from_address
            message["To"] = call.target
            message["Subject"] = _text("subject", self.subject, lookup)
            message[INTENT_HEADER] = call.intent_digest
            message.set_content(_text("body", self.body, lookup))
        except ValueError as error:
            raise InvalidArguments(f"cannot write the message: {error}", field="args") from error
        data = re.sub(rb"(?m)^\.", b"..", message.as_bytes())
        return data + (b"" if data.endswith(b"\r\n") else b"\r\n") + b".\r\n"


def _text(name: str, template: str, lookup: Lookup) -> str:
    try:
        value = render(template, lookup)
    except TemplateError as error:
        raise InvalidArguments(f"the {name}: {error}", field="args") from error
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if is_absent(value) or not isinstance(value, str):
        raise InvalidArguments(f"the {name} template does not give text", field="args")
    return value


def _reply_bytes(code: int, reply: bytes) -> bytes:
    return str(code).encode() + b" " + reply


def _said(code: int, reply: bytes) -> str:
    return _reply_bytes(code, reply).decode(errors="replace").replace("\n", " ")


class Session:
    """One SMTP conversation, remembering its step. Until the message content goes out, no
    failure can have delivered it; once it has, a cut or a silence may have."""

    def __init__(self, connection: Connection, timeout: Timeout, sent_id: str) -> None:
        self.connection = connection
        self.timeout = timeout
        self.sent_id = sent_id
        self.step = "connect"
        self.client: smtplib.SMTP | None = None

    def deliver(self, recipient: str, content: bytes) -> tuple[int, bytes]:
        """The server's reply to the end of the message, when it accepted it."""
        try:
            answer = self._deliver(recipient, content)
            assert self.client is not None
            with contextlib.suppress(OSError):
                self.client.quit()  # a courtesy: the message is accepted whatever QUIT gets
            return answer
        finally:
            if self.client is not None:
                self.client.close()

    def _deliver(self, recipient: str, content: bytes) -> tuple[int, bytes]:
        try:
            client = self._open()
            self.step = "mail"
            self._expect(client.mail(self.connection.from_address), 250)
            self.step = "rcpt"
            self._expect(client.rcpt(recipient), 250, 251)
            self.step = "data"
            self._expect(client.docmd("DATA"), 354)
        except smtplib.SMTPResponseException as error:
            raise self._refused(error.smtp_code, error.smtp_error) from error
        except OSError as error:  # refused, reset, timed out, TLS; smtplib's errors too
            raise TransientError(
                f"nothing was sent: {_STEPS[self.step]} failed: {_why(error)}"
            ) from error
        try:
            client.send(content)
            code, reply = client.getreply()
        except OSError as error:
            raise self._unknown(f"the connection failed ({_why(error)})") from error
        if 200 <= code < 300:
            return code, reply
        if 500 <= code < 600:
            raise BusinessRejection(f"the server refused the message: {_said(code, reply)}")
        raise self._unknown(f"the server answered {_said(code, reply)}", code, reply)

    def _open(self) -> smtplib.SMTP:
        connection = self.connection
        connect_timeout, read_timeout = self.timeout
        # Connecting in the constructor: it names the host TLS verifies the certificate for.
        host, port, name = connection.host, connection.port, connection.domain
        if connection.tls == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                host,
                port,
                local_hostname=name,
                timeout=connect_timeout,
                context=ssl.create_default_context(),
            )
        else:
            client = smtplib.SMTP(host, port, local_hostname=name, timeout=connect_timeout)
        self.client = client
        assert client.sock is not None
        client.sock.settimeout(read_timeout)
        self.step = "ehlo"
        client.ehlo_or_helo_if_needed()
        if connection.tls == "starttls":
            self.step = "starttls"
            client.starttls(context=ssl.create_default_context())
            self.step = "ehlo"
            client.ehlo_or_helo_if_needed()
        if connection.username is not None and connection.password is not None:
            self.step = "auth"
            offered = set(client.esmtp_features.get("auth", "").upper().split())
            if not offered & _MECHANISMS:
                raise PermissionDenied(
                    "nothing was sent: the server offers no AUTH mechanism smtplib speaks "
                    f"({', '.join(sorted(_MECHANISMS))}) with tls = {connection.tls!r}"
                )
            client.login(connection.username, connection.password)
        return client

    def _expect(self, answer: tuple[int, bytes], *accepted: int) -> None:
        code, reply = answer
        if code not in accepted:
            raise smtplib.SMTPResponseException(code, reply)

    def _refused(self, code: int, reply: bytes) -> ToolError:
        """A refusal before the message content was sent: nothing can have been delivered."""
        message = f"nothing was sent: {_STEPS[self.step]} was answered {_said(code, reply)}"
        if not 500 <= code < 600 or self.step == "starttls":
            return TransientError(message)
        if self.step == "rcpt":
            if code in _MALFORMED_ADDRESS:
                return InvalidArguments(message, field="target")
            return BusinessRejection(message)
        return PermissionDenied(message)

    def _unknown(self, what: str, code: int | None = None, reply: bytes = b"") -> ToolError:
        return ResultUncertain(
            f"after the message was sent, {what}: it may have been delivered; look for "
            f"Message-ID {self.sent_id} in the recipient's mailbox before sending it again",
            raw_response_hash=None if code is None else content_hash(_reply_bytes(code, reply)),
        )


def _why(error: OSError) -> str:
    return str(error) or type(error).__name__
