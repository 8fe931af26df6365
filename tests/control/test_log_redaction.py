"""Decision tokens never reach a log line: the settings' handlers redact them (gunicorn's
access log is tested with gunicorn itself: tests/deploy/test_gunicorn.py)."""

from __future__ import annotations

import logging

import pytest

from control.foundation.log_redaction import without_decision_tokens

TOKEN = "eyJhIjoiYWN0aW9uIn0:1w3XyZ:SECRET-PART"


@pytest.mark.parametrize(
    ("logger", "message", "args"),
    [
        ("django.request", "Bad Request: %s", (f"/decide/{TOKEN}/",)),
        ("django.server", '"%s" %s %s', (f"GET /decide/{TOKEN}/ HTTP/1.1", "200", "512")),
        ("runs.anything", "next=%s", (f"%2Fdecide%2F{TOKEN.replace(':', '%3A')}%2F",)),
    ],
)
def test_the_configured_handlers_redact_decision_tokens(logger, message, args):
    # The handlers that settings.LOGGING gave the logger (or, if it propagates, the root's).
    named = logging.getLogger(logger)
    handlers = named.handlers if not named.propagate else logging.getLogger().handlers
    configured = [handler for handler in handlers if handler.filters]
    assert configured, f"{logger} writes through no handler of ours"
    for handler in configured:
        record = named.makeRecord(logger, logging.WARNING, __file__, 1, message, args, None)
        assert handler.filter(record)
        written = handler.format(record)
        assert "decide" in written
        assert "SECRET-PART" not in written
        assert "[redacted]" in written


def test_text_without_a_decision_link_is_left_alone():
    text = "GET /runs/decide-later/ HTTP/1.1 /inbox/?run=42"
    assert without_decision_tokens(text) == text
