"""Pages are tested as a person uses them: logged in through Django's test client, with or
without htmx's request header, in their own tenant or another, with or without the role."""

from __future__ import annotations

import base64
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.contrib.messages import get_messages

from runs.models import Action, Run
from runs.services import approval_expire, tool_policy_set
from tests.factories import make_action, make_run, make_tenant, make_user

HTMX = {"HTTP_HX_REQUEST": "true"}
# A Standard Webhooks secret (the webhook's default format): whsec_ and a base64 key.
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"webhook-test-key-of-thirty-two-b").decode()


@pytest.fixture
def tenant():
    return make_tenant()


@pytest.fixture
def other_tenant():
    return make_tenant()


@pytest.fixture
def operator(tenant):
    return make_user(tenant, "operator", username="olivia")


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


def client_for(client, user):
    client.force_login(user)
    return client


def binding(action: Action) -> dict:
    """What the inbox shows for a request, as its forms post it back."""
    return {"seen_digest": action.intent_digest, "seen_state_version": action.base_version}


def flashed(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def make_waiting(tenant, **fields) -> Action:
    fields.setdefault("args", {"resolution": "fixed"})
    run_fields = fields.pop("run_fields", {})
    return make_action(make_run(tenant, **run_fields), **fields)


def expiring_in_a_second(tenant, *, actor: str = "tests") -> None:
    """ticket.close requests of this tenant expire one second after they are proposed."""
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=1,
        actor=actor,
    )


def make_expired(tenant, *, actor: str = "tests") -> Action:
    """A request left unanswered past its expiry, as the sweep leaves it."""
    expiring_in_a_second(tenant, actor=actor)
    action = make_waiting(tenant)
    time.sleep(1.05)
    action.run.refresh_from_db()
    assert approval_expire(action=action)
    action.refresh_from_db()
    return action


def phase_of(run: Run) -> str:
    run.refresh_from_db()
    return run.phase


@pytest.fixture
def receiver():
    """A webhook endpoint that records what it was sent and answers `status`."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        status = 204

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body})
            self.send_response(Handler.status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {
        "url": f"http://127.0.0.1:{server.server_port}/hook",
        "received": received,
        "handler": Handler,
    }
    server.shutdown()
    server.server_close()
