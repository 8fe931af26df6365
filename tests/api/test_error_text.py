"""Tool errors reach agents without the addresses of the systems behind Countersign."""

from __future__ import annotations

import socket

import pytest

from runs.models import Action
from runs.tools.errors import TransientError
from runs.tools.http import send_write
from tests.factories import make_action, make_run

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_api_shows_a_real_connection_error_without_the_connectors_address(api):
    url = f"http://127.0.0.1:{_closed_port()}/v1/charges?token=s3cret-capability"
    with pytest.raises(TransientError) as refused:
        send_write("POST", url, body={}, timeout=(1.0, 1.0))
    run = make_run(api.tenant)
    action = make_action(run)
    # As the worker records it: the tool's own message, whole, for the operators' pages.
    Action.objects.filter(pk=action.pk).update(last_error=str(refused.value))

    shown = api.get(f"/actions/{action.pk}").body["last_error"]

    assert "s3cret-capability" not in shown
    assert "127.0.0.1" not in shown
    assert shown.startswith("could not connect to")
