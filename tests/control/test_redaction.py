"""Agents read tool errors without the addresses of the systems behind Countersign."""

from __future__ import annotations

import base64

import pytest

from control.foundation.redaction import HIDDEN, redact


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


SECRET = "Tok en/+s3cr3t:9Zq"


@pytest.mark.parametrize("prefix", ["", "a", "ab", "user:", "Bearer x:"])
def test_a_secret_inside_a_longer_base64_run_is_found_at_any_alignment(prefix):
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        run = encode((prefix + SECRET + "!tail").encode()).decode()
        shown = redact(f"creds {run}", secrets={SECRET: "${TOKEN}"})
        assert "${TOKEN}" in shown
        assert run not in shown


def test_percent_encoded_secrets_are_found_in_either_hex_case():
    text = "url /t/Tok%20en%2f%2bs3cr3t%3a9Zq/x and Tok+en%2F%2Bs3cr3t%3A9Zq"
    assert redact(text, secrets={SECRET: "${TOKEN}"}, addresses=False) == (
        "url /t/${TOKEN}/x and ${TOKEN}"
    )


def test_text_without_the_secrets_is_left_alone():
    text = "HTTP 409: ticket-7 is already closed (version 3)"
    assert redact(text, secrets={SECRET: "${TOKEN}"}, hosts=["desk.internal"]) == text
