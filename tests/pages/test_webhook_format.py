"""The webhook's formats, checked the way receivers check them: the Standard Webhooks
reference library verifies the signature, the CloudEvents SDK reads the envelope. The
deprecated countersign-v1 format stays available for one release behind a setting."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from django.core.exceptions import ImproperlyConfigured
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from runs.models import Action, OutboxMessage
from runs.models.notify_kinds import EXPIRED, REQUESTED
from runs.notifications import approval_notify
from runs.notify.events import EVENT_TYPES
from runs.notify.signing import (
    LEGACY,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    standard_key,
    webhook_verify,
)
from tests.factories import make_notify_plan
from tests.pages.conftest import WEBHOOK_SECRET, make_expired, make_waiting

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
SECRET = WEBHOOK_SECRET


@pytest.fixture
def hook(settings, receiver):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    return receiver["received"]


def test_a_standard_webhooks_library_verifies_each_delivery_and_refuses_a_changed_one(tenant, hook):
    action = make_waiting(tenant)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 1

    (delivery,) = hook
    headers, body = delivery["headers"], delivery["body"]
    assert Webhook(SECRET).verify(body, headers)["id"] == f"requested:{action.pk}"
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET).verify(body.replace(b"ticket-7", b"ticket-8"), headers)
    other = "whsec_" + base64.b64encode(b"another-key-of-thirty-two-bytes!").decode()
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(other).verify(body, headers)
    moved = {**headers, "webhook-id": f"expired:{action.pk}"}
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET).verify(body, moved)  # the id is signed: no replay under another
    stale = {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 600)}
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(body, stale)


def test_each_delivery_is_a_cloudevent_whose_data_is_the_moment(tenant, hook):
    action = make_waiting(tenant)

    approval_notify(action=str(action.pk), kind=REQUESTED)

    (delivery,) = hook
    assert delivery["headers"]["Content-Type"] == "application/cloudevents+json; charset=utf-8"
    event = from_http_event(HTTPMessage(headers=delivery["headers"], body=delivery["body"]))
    assert event.get_specversion() == "1.0"
    assert event.get_type() == "com.countersign.intent.requested"
    assert event.get_id() == delivery["headers"]["webhook-id"] == f"requested:{action.pk}"
    assert event.get_source().endswith(f"/runs/{action.run_id}/")
    assert event.get_subject() == str(action.pk)
    assert event.get_extension("tenant") == tenant.name
    assert event.get_datacontenttype() == "application/json"
    created = OutboxMessage.objects.get(action=action, payload__kind=REQUESTED).created_at
    assert event.get_time() == created  # when the moment happened, not when it was sent
    data = event.get_data()
    assert data["action"]["intent_digest"] == action.intent_digest
    assert data["action"]["state_version"] == action.base_version
    assert (data["kind"], data["plan"]) == (REQUESTED, None)


def test_every_moment_has_its_own_type_and_a_plan_is_announced_as_one(tenant, hook):
    expired = make_expired(tenant)
    bodies = {f"user-{number}@example.com": "Your order shipped." for number in (1, 2, 3)}
    plan = make_notify_plan(tenant, goal="tell three customers", bodies=bodies)
    first = Action.objects.filter(plan=plan).order_by("position").first()

    approval_notify(action=str(expired.pk), kind=EXPIRED)
    approval_notify(action=str(first.pk), kind=REQUESTED)

    events = [json.loads(delivery["body"]) for delivery in hook]
    assert [event["type"] for event in events] == [
        "com.countersign.intent.expired",
        "com.countersign.intent.requested",
    ]
    assert events[1]["data"]["plan"]["digest"] == plan.digest
    assert events[1]["data"]["plan"]["size"] == 3
    assert set(EVENT_TYPES.values()) == {
        f"com.countersign.intent.{kind}"
        for kind in ("requested", "expiring", "expired", "escalated")
    }


def test_a_moment_sent_again_keeps_its_id_so_the_receiver_dedupes(tenant, hook):
    action = make_waiting(tenant)

    approval_notify(action=str(action.pk), kind=REQUESTED)
    approval_notify(action=str(action.pk), kind=REQUESTED)  # a retry after a lost answer

    ids = {delivery["headers"]["webhook-id"] for delivery in hook}
    assert ids == {f"requested:{action.pk}"}


def test_the_deprecated_format_is_still_sent_when_the_setting_asks_for_it(
    tenant, settings, receiver
):
    secret = "webhook-test-secret"  # any string: the old format's secrets stay valid
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = secret
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT = LEGACY
    action = make_waiting(tenant)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 1

    (delivery,) = receiver["received"]
    headers, body = delivery["headers"], delivery["body"]
    signed = {"timestamp": headers[TIMESTAMP_HEADER], "signature": headers[SIGNATURE_HEADER]}
    assert webhook_verify(secret=secret, body=body, **signed)
    assert not webhook_verify(secret="another-secret", body=body, **signed)
    assert not webhook_verify(secret=secret, body=body.replace(b"ticket-7", b"ticket-8"), **signed)
    assert "webhook-signature" not in headers
    payload = json.loads(body)
    assert payload["id"] == f"requested:{action.pk}"
    assert payload["action"]["intent_digest"] == action.intent_digest


@pytest.mark.parametrize(
    ("secret", "refusal"),
    [
        ("webhook-test-secret", "must be whsec_ and a base64 key"),
        ("whsec_not base64!", "not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "the key is 5 bytes; use 24 to 64"),
    ],
)
def test_a_secret_the_standard_format_cannot_use_is_refused_saying_why(secret, refusal):
    with pytest.raises(ImproperlyConfigured, match=refusal):
        standard_key(secret)


@pytest.mark.parametrize(
    ("environment", "refusal"),
    [
        ({"COUNTERSIGN_NOTIFY_WEBHOOK_SECRET": "plain"}, "must be whsec_"),
        ({}, "without COUNTERSIGN_NOTIFY_WEBHOOK_SECRET"),
        ({"COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT": "json"}, "must be one of standard, countersign-v1"),
    ],
)
def test_the_server_does_not_start_with_a_webhook_it_could_not_sign(environment, refusal):
    result = _check(environment)

    assert result.returncode != 0
    assert refusal in result.stderr


def test_the_server_starts_with_a_standard_secret_or_the_deprecated_format():
    for environment in (
        {"COUNTERSIGN_NOTIFY_WEBHOOK_SECRET": SECRET},
        {"COUNTERSIGN_NOTIFY_WEBHOOK_SECRET": "plain", "COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT": LEGACY},
    ):
        result = _check(environment)
        assert result.returncode == 0, result.stderr


def _check(environment: dict[str, str]) -> subprocess.CompletedProcess:
    """`manage.py check` with a webhook URL and these settings: how the server starts."""
    env = {key: value for key, value in os.environ.items() if "WEBHOOK" not in key}
    env |= {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "COUNTERSIGN_NOTIFY_WEBHOOK_URL": "http://x",
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env | environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
