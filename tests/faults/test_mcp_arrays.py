"""A write whose arguments are an array of objects, end to end with real worker processes and
the reference MCP filesystem server (edit_file): the operator reads the array on the card,
edits it in the inbox, approves, and the worker makes exactly the approved edits once."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from runs.models import Action
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.filesystem_upstream import filesystem_connector
from tests.pages.conftest import binding
from tests.processes import connector_workers

pytestmark = pytest.mark.django_db(transaction=True)

DRAFT = "title: Release notes\nstatus: draft\nowner: nobody\n"
TWO_EDITS = [
    {"oldText": "status: draft", "newText": "status: final"},
    {"oldText": "owner: nobody", "newText": "owner: olivia"},
]


@pytest.fixture
def notes(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    path = root / "notes.md"
    path.write_text(DRAFT)
    return path


@pytest.fixture
def files_workers(redis_queue, notes, tmp_path, settings, monkeypatch):
    """Worker processes, and this process, that know the files connector (the reference
    filesystem server over stdio, serving the notes' folder)."""
    text = filesystem_connector(notes.parent)
    with connector_workers(text, tmp_path, settings, monkeypatch) as pool:
        yield pool


def proposed_edit(notes, edits) -> tuple[Action, object]:
    tenant = make_tenant()
    action = make_action(
        make_run(tenant), tool="files.edit", target=str(notes), args={"edits": edits}
    )
    return action, make_user(tenant, "operator", username="olivia")


def test_an_approved_array_of_edits_is_made_once_in_order_with_a_receipt(files_workers, notes):
    action, operator = proposed_edit(notes, TWO_EDITS)
    assert action.args == {"edits": TWO_EDITS}
    approve(action, operator)

    assert files_workers.run_burst() == 0

    action.refresh_from_db()
    assert action.status == "succeeded", [a.error for a in action.attempts.all()]
    assert notes.read_text() == "title: Release notes\nstatus: final\nowner: olivia\n"
    assert action.receipt.intent_digest == action.intent_digest
    assert action.attempts.count() == 1


def test_an_operator_reads_and_edits_the_array_then_the_worker_makes_the_edited_change(
    files_workers, notes, client
):
    action, operator = proposed_edit(notes, TWO_EDITS)
    client.force_login(operator)

    card = client.get(reverse("inbox")).content.decode()
    assert "&quot;oldText&quot;: &quot;owner: nobody&quot;" in card
    form = client.get(reverse("inbox_edit", args=[action.pk])).content.decode()
    assert 'name="arg__edits"' in form
    assert "owner: olivia" in form

    edits = [TWO_EDITS[0], {"oldText": "owner: nobody", "newText": "owner: omar"}]
    broken = [TWO_EDITS[0], {"oldText": "owner: nobody"}]
    refused = client.post(
        reverse("inbox_edit", args=[action.pk]),
        {**binding(action), "arg__edits": json.dumps(broken), "step": "approve"},
    )
    assert refused.status_code == 422
    assert "args.edits[1].newText is required" in refused.content.decode()
    assert Action.objects.filter(run=action.run).count() == 1

    response = client.post(
        reverse("inbox_edit", args=[action.pk]),
        {**binding(action), "arg__edits": json.dumps(edits), "step": "approve"},
    )
    assert response.status_code == 302
    edited = Action.objects.get(run=action.run, action_id="close-ticket~2")
    assert (edited.status, edited.args) == ("approved", {"edits": edits})

    assert files_workers.run_burst() == 0

    edited.refresh_from_db()
    assert edited.status == "succeeded", [a.error for a in edited.attempts.all()]
    assert notes.read_text() == "title: Release notes\nstatus: final\nowner: omar\n"
