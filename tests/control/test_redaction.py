"""Agents read tool errors without the addresses of the systems behind Countersign."""

from __future__ import annotations

import pytest

from control.redaction import HIDDEN, redact


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("could not connect to https://pay.internal/v1/charges?token=s3cret", "pay.internal"),
        ("HTTPConnectionPool(host='10.1.2.3', port=8080): Max retries", "10.1.2.3"),
        ("Max retries exceeded with url: /hooks/abc?key=s3cret (Caused by ...)", "s3cret"),
        ("redis at cache.internal:6379 refused", "cache.internal:6379"),
        ("no answer from 192.168.0.7 in time", "192.168.0.7"),
    ],
)
def test_addresses_and_the_tokens_in_them_are_hidden(text, hidden):
    shown = redact(text)
    assert hidden not in shown
    assert HIDDEN in shown


def test_text_redact_is_left_alone():
    text = "HTTP 409: ticket-7 is already closed (version 3)"
    assert redact(text) == text
