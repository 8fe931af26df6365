"""What the `http` kind adds beyond the demo's tools, against a real local server: the
declared idempotency header, HMAC signatures over the exact body, declared status classes,
receipts without an echoed digest (the proof is the key alone), query absence, path quoting,
and secrets that never leave in an error."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from runs.tools.calls import ToolCall
from runs.tools.errors import (
    BusinessRejection,
    IdempotencyConflict,
    InvalidArguments,
    TransientError,
)
from runs.tools.testing import frozen_call
from tests.registry import connector_tools

TIMEOUT = (2.0, 2.0)
SECRET = "whsec_9f8e7d6c5b4a"
TOKEN = "tok_live_0123456789"

ISSUES = """
[connectors.issues]
kind = "http"
base_url = "${ISSUES_URL}"
headers = { Authorization = "Bearer ${ISSUES_TOKEN}" }
sign = { header = "X-Signature", secret = "${ISSUES_SIGNING_SECRET}" }
status = { "409" = "conflict", "422" = "rejected" }

[connectors.issues.tools.comment]
contract_version = "v1"
effect_class = "reconcilable"
path = "repos/{target}/comments"
params = { source = "countersign" }
body = { text = "{args.text}", label = "{args.label}" }
idempotency_header = "X-Request-Key"
receipt = { id = "/comment/id", status = "created" }
query = { path = "requests/{key}", absent = { status = 404 } }
target_schema = { type = "string", maxLength = 100 }

[connectors.issues.tools.comment.args_schema]
type = "object"
properties = { text = { type = "string" }, label = { type = "string" } }
required = ["text"]
additionalProperties = false
"""


@pytest.fixture
def comment(external, tmp_path, settings):
    environ = {
        "ISSUES_URL": settings.SANDBOX_URL,
        "ISSUES_TOKEN": TOKEN,
        "ISSUES_SIGNING_SECRET": SECRET,
    }
    [tool] = connector_tools(tmp_path, ISSUES, environ=environ)
    return tool


def call(tool, target="acme/desk", args=None) -> ToolCall:
    return frozen_call(tool, target, args or {"text": "Fixed in 2.1"}, key="run-1/close-7")


def test_a_write_carries_key_token_and_a_signature_of_the_exact_body(external, comment):
    external.answer(201, {"comment": {"id": "c_77"}})
    receipt = comment.execute(call(comment), timeout=TIMEOUT)

    [(method, path, headers, body)] = external.requests
    assert (method, path) == ("POST", "/sandbox/repos/acme%2Fdesk/comments?source=countersign")
    assert headers["X-Request-Key"] == "run-1/close-7"
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Signature"] == f"sha256={expected}"
    # An absent optional argument leaves its field out.
    assert json.loads(body) == {"text": "Fixed in 2.1"}
    assert (receipt.receipt_id, receipt.status) == ("c_77", "created")


def test_without_an_echoed_digest_the_receipt_is_the_calls_and_says_so(external, comment):
    external.answer(201, {"comment": {"id": "c_78"}})
    sent = call(comment)
    receipt = comment.execute(sent, timeout=TIMEOUT)
    assert receipt.intent_digest == sent.intent_digest
    assert receipt.idempotency_key == sent.idempotency_key
    assert "the receipt's proof is the key alone" in comment.capabilities()
    assert comment.describe()["echoes_digest"] is False


def test_a_query_finds_by_key_and_absence_is_only_the_declared_answer(external, comment):
    external.answer(200, {"comment": {"id": "c_79"}})
    found = comment.query("run-1/close-7", timeout=TIMEOUT, intent_digest="sha256:" + "a" * 64)
    assert (found.receipt_id, found.intent_digest) == ("c_79", "sha256:" + "a" * 64)
    assert external.requests[-1][1] == "/sandbox/requests/run-1%2Fclose-7"

    external.answer(404, {"detail": "no such request"})
    assert comment.query("run-1/other", timeout=TIMEOUT) is None


def test_declared_status_classes_override_the_defaults(external, comment):
    external.answer(409, {"type": "key_reused", "detail": "the key was used"})
    with pytest.raises(IdempotencyConflict):
        comment.execute(call(comment), timeout=TIMEOUT)
    external.answer(422, {"detail": "the issue is locked"})
    with pytest.raises(BusinessRejection, match="locked"):
        comment.execute(call(comment), timeout=TIMEOUT)
    external.answer(400, {"detail": "bad"})
    with pytest.raises(InvalidArguments):  # undeclared: the default class
        comment.execute(call(comment), timeout=TIMEOUT)


def test_secrets_are_scrubbed_from_every_error(external, comment):
    external.answer(400, {"detail": f"token {TOKEN} may not comment; secret {SECRET}"})
    with pytest.raises(InvalidArguments) as caught:
        comment.execute(call(comment), timeout=TIMEOUT)
    assert TOKEN not in str(caught.value)
    assert SECRET not in str(caught.value)
    assert "${ISSUES_TOKEN}" in str(caught.value)


def test_a_refused_connection_is_transient_and_names_no_secret(tmp_path, closed_port):
    environ = {
        "ISSUES_URL": f"http://127.0.0.1:{closed_port}/{TOKEN}/",
        "ISSUES_TOKEN": TOKEN,
        "ISSUES_SIGNING_SECRET": SECRET,
    }
    [tool] = connector_tools(tmp_path, ISSUES, environ=environ)
    with pytest.raises(TransientError) as caught:
        tool.execute(call(tool), timeout=TIMEOUT)
    assert TOKEN not in str(caught.value)
