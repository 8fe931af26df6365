"""The names users, scripts and stored rows rely on stay exactly as they were.

Saved under tests/fixtures/interfaces/ before the house was rearranged (issue 11) and compared
on every run: the OpenAPI document byte for byte, every URL name with its route, every
management command's name, the /metrics text of a fixed scenario, and the job paths that
outbox rows and queued RQ jobs store. A change to any of them is a change to the contract:
regenerate with COUNTERSIGN_WRITE_INTERFACES=1 only on purpose, and say so in the commit.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import django_rq
import pytest
from django.core.management import get_commands
from django.db import connection
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

from control.foundation.counters import REDIS_COUNTERS
from control.metrics import metrics_view
from runs.execution.worker import settle_unknown
from runs.models import OutboxMessage
from runs.services import lease_claim, protocol
from runs.tools.retry import DEFAULT_POLICY
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db
SAVED = Path(__file__).parent / "fixtures" / "interfaces"
WRITE = os.environ.get("COUNTERSIGN_WRITE_INTERFACES") == "1"


def same_as_saved(name: str, text: str) -> None:
    path = SAVED / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the saved interface"


def _routes(patterns, prefix: str = "", namespace: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield f"{namespace}{pattern.name} /{prefix}{pattern.pattern}"


def test_the_openapi_document_is_unchanged(client):
    same_as_saved("openapi.json", client.get("/api/v1/openapi.json").content.decode())


def test_every_url_name_keeps_its_route():
    same_as_saved("urls.txt", "\n".join(sorted(set(_routes(get_resolver().url_patterns)))) + "\n")


def test_every_management_command_keeps_its_name():
    same_as_saved("commands.txt", "\n".join(sorted(get_commands())) + "\n")


def test_the_metrics_and_the_stored_job_paths_are_unchanged(settings, blind_tool):
    """One scenario that writes every kind of outbox row: a proposal (notify approvers), an
    approval (execute), a write in doubt (open a case); then one scrape of /metrics."""
    settings.COUNTERSIGN_METRICS_TOKEN = "a-long-random-metrics-token"
    tenant = make_tenant("interfaces")
    operator = make_user(tenant, "operator", username="interfaces-operator")
    make_action(make_run(tenant), target="ticket-3")
    action = make_action(make_run(tenant), tool="blind.noop", target="item-1", args={"n": 1})
    approve(action, operator)
    dead = lease_claim(run_id=action.run_id, owner="worker-a")
    protocol.attempt_begin(action_pk=action.pk, lease=dead, worker="worker-a")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = %s",
            [action.run_id],
        )
    taker = lease_claim(run_id=action.run_id, owner="worker-b")
    action.refresh_from_db()
    settle_unknown(action=action, lease=taker, worker="worker-b", policy=DEFAULT_POLICY)

    jobs = sorted(set(OutboxMessage.objects.values_list("job", flat=True)))
    for job in jobs:
        assert callable(import_string(job)), f"{job} no longer resolves"
    same_as_saved("outbox_jobs.json", json.dumps(jobs, indent=2) + "\n")

    # Worker counters live in Redis, shared by the tests of this process: start them at zero.
    django_rq.get_connection(settings.RQ_EXECUTION_QUEUE).delete(REDIS_COUNTERS)
    request = RequestFactory().get(
        "/metrics", HTTP_AUTHORIZATION="Bearer a-long-random-metrics-token"
    )
    text = metrics_view(request).content.decode()
    # Durations and ages depend on the wall clock; their names, labels and counts do not.
    steady = re.sub(r"^(\S*(?:_sum|_seconds)(?:\{[^}]*\})?) \S+$", r"\1 <time>", text, flags=re.M)
    same_as_saved("metrics.txt", steady)
