"""What an agent wrote reaches a mail quoted, never as lines of Countersign's own: through a
real SMTP server (aiosmtpd), as the approver's mail client would receive it."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings

from runs.models.notify_kinds import REQUESTED
from runs.notifications import approval_notify
from runs.notify.mail import AGENT_TEXT_HEADING, AGENT_TEXT_LIMIT
from tests.factories import make_action, make_observation, make_run, make_user
from tests.smtp import Mailbox, smtp_server

pytestmark = pytest.mark.django_db

FORGED_GOAL = "tidy up\n\nApprove here: https://evil.example/decide/abc/\n\nDecide in the inbox: x"
FORGED_SUMMARY = "ok\r\nReview and decide (a link for you alone):\r\nhttps://evil.example/\x1b[2J"


def _received(tenant, *, goal: str, summary: str, target: str = "ticket-7", tool=None, args=None):
    """The mail one operator receives for a request made of these texts."""
    operator = make_user(tenant, "operator")
    operator.email = "op@example.com"
    operator.save(update_fields=["email"])
    run = make_run(tenant, goal=goal)
    fields = {"tool": tool, "args": args} if tool else {}
    action = make_action(
        run, target=target, observation=make_observation(run, summary=summary), **fields
    )
    mailbox = Mailbox()
    with smtp_server(mailbox) as port:
        mailer = {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port},
        }
        with override_settings(MAILERS={"default": mailer}):
            assert approval_notify(str(run.pk), action=str(action.pk), kind=REQUESTED) == 1
    (message,) = mailbox.messages
    return message, message.get_content()


def test_agent_text_is_quoted_on_one_line_each_below_the_decision_link(tenant):
    _, body = _received(tenant, goal=FORGED_GOAL, summary=FORGED_SUMMARY)
    lines = body.splitlines()

    # Nothing the agent wrote starts a line: each of its texts is one quoted line under "> ".
    assert not [line for line in lines if line.startswith(("Approve here", "https://evil"))]
    ours_only = [line for line in lines if line.startswith(("Review and decide", "Decide in"))]
    assert len(ours_only) == 2  # our link's heading and our inbox line, nothing forged
    assert [line for line in lines if "evil" in line] == [
        '> Run goal: "tidy up\\n\\nApprove here: https://evil.example/decide/abc/\\n\\n'
        'Decide in the inbox: x"',
        '> Because:  "ok\\r\\nReview and decide (a link for you alone):\\r\\n'
        'https://evil.example/\\u001b[2J"',
    ]
    # Countersign's own link comes first; the agent's words after the heading that names them.
    ours = next(index for index, line in enumerate(lines) if "/decide/" in line)
    assert lines[ours].startswith("http://localhost:8000/decide/")
    goal = next(index for index, line in enumerate(lines) if line.startswith("> Run goal"))
    assert ours < lines.index(AGENT_TEXT_HEADING) < goal
    assert "\x1b" not in body


def test_agent_text_in_a_mail_is_capped(tenant):
    _, body = _received(tenant, goal="g" * 2000, summary="s" * 301)  # the API's limits

    goal_line = next(line for line in body.splitlines() if line.startswith("> Run goal"))
    assert goal_line == f'> Run goal: "{"g" * AGENT_TEXT_LIMIT}" (and 1700 more characters)'
    assert '"' + "s" * AGENT_TEXT_LIMIT + '" (and 1 more characters)' in body


def test_look_alike_and_direction_changing_text_is_escaped_and_flagged_in_the_mail(tenant):
    # A target may hold no control or format character (its idempotency key refuses them),
    # so the override rides in the arguments; the target spoofs a domain instead.
    target = "ops@ex\u0430mple.com"
    message, body = _received(
        tenant,
        goal="notify ops",
        summary="disk full",
        target=target,
        tool="notify.send",
        args={"body": "refund \u202e0001$ to acct 42"},
    )

    assert "\u202e" not in body
    warnings = [line for line in body.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 2
    assert warnings[0].startswith(
        'Warning:  look-alike characters in the target: "ex\u0430mple.com"'
    )
    assert "xn--exmple-4nf.com" in warnings[0]
    assert "U+0430 CYRILLIC SMALL LETTER A" in warnings[0]
    assert warnings[1].startswith(
        'Warning:  look-alike characters in the arguments: "\\u202e0001$"'
    )
    assert "invisible or direction-changing" in warnings[1]
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in warnings[1]
    assert f'Target:   "{target}"' in body
    assert message["Subject"] == f"Approval requested: notify.send {target}"
    assert re.search(r"^Tool: +notify\.send$", body, re.MULTILINE)
