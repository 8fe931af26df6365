"""A real SMTP server for the smtp kind's tests (aiosmtpd on a free local port), the mail it
received, and a connector file that points at it."""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import socket
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

FROM_ADDRESS = "countersign@example.test"
USERNAME = "countersign"
PASSWORD = "correct-horse-battery-staple"


class Mailbox:
    """An aiosmtpd handler: stores each message whose DATA arrives, then answers `reply`.

    cut=True closes the connection after storing the message, without answering: the client
    sent the whole message and never learns whether it was accepted. delay holds the answer
    back that many seconds. rcpt_reply refuses every recipient with that reply.
    """

    def __init__(
        self,
        *,
        reply: str = "250 2.0.0 queued",
        cut: bool = False,
        delay: float = 0,
        rcpt_reply: str | None = None,
    ) -> None:
        self.reply = reply
        self.cut = cut
        self.delay = delay
        self.rcpt_reply = rcpt_reply
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []

    async def handle_RCPT(self, server, session, envelope, address, options) -> str:
        if self.rcpt_reply is not None:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server, session, envelope) -> str:
        # Stored as a mailbox would: with this system's line ends, not the wire's CRLF.
        stored = envelope.original_content.replace(b"\r\n", b"\n")
        message = email.message_from_bytes(stored, policy=email.policy.default)
        self.messages.append(message)  # type: ignore[arg-type]
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        if self.cut:
            server.transport.close()
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.reply

    def message_ids(self) -> list[str]:
        return [message["Message-ID"] for message in self.messages]


def authenticator(server, session, envelope, mechanism, auth_data) -> AuthResult:
    """Accepts USERNAME with PASSWORD. A refusal repeats the password it was given (a careless
    server), so only scrubbing keeps it out of Countersign's errors."""
    login = auth_data.login.decode()
    password = auth_data.password.decode()
    if (login, password) == (USERNAME, PASSWORD):
        return AuthResult(success=True)
    return AuthResult(
        success=False, handled=False, message=f"535 5.7.8 {login}/{password} is not known"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def smtp_server(handler: Any, **options: Any) -> Iterator[int]:
    """An SMTP server on 127.0.0.1 for the block; yields its port. options go to aiosmtpd's
    SMTP (authenticator, auth_require_tls...)."""
    port = free_port()
    controller = Controller(
        handler, hostname="127.0.0.1", port=port, server_hostname="mail.example.test", **options
    )
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


def connector_file(
    port: int, *, tls: str = "none", timeout: float = 5, credentials: bool = False
) -> str:
    """A connector `mail` with one tool, `mail.send`, sending to the server on port."""
    login = 'username = "countersign"\npassword = "${SMTP_PASSWORD}"\n' if credentials else ""
    return f"""
[connectors.mail]
kind = "smtp"
host = "127.0.0.1"
port = {port}
tls = "{tls}"
from_address = "{FROM_ADDRESS}"
timeout = {timeout}
{login}
[connectors.mail.tools.send]
contract_version = "v1"
effect_class = "not_retriable"
normalize = {{ target = ["strip", "lower"] }}
target_schema = {{ type = "string", maxLength = 254 }}
subject = "{{args.subject}}"
body = "{{args.body}}"

[connectors.mail.tools.send.args_schema]
type = "object"
properties = {{ subject = {{ type = "string", minLength = 1 }}, body = {{ type = "string" }} }}
required = ["subject", "body"]
additionalProperties = false
"""
