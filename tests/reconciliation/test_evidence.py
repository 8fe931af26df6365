"""A reconciler points at what the external system records: a record the probes read, or a
receipt id it shows, and is never asked for a digest the system does not keep.

The notifier (the sandbox, over real HTTP) lists what a recipient was sent, with ids and
times but no digest: exactly what a reconciler of a dropped notification has to go on.
"""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse

from reconciliation.evidence import candidates, read_records
from reconciliation.exceptions import ResolutionRefused
from reconciliation.selectors import case_by_id, first_attempt_started
from reconciliation.services import case_resolve
from runs.models import Action
from tests.factories import make_policy, make_tenant, make_user
from tests.pages.conftest import HTMX, client_for
from tests.reconciliation.test_cases import approved, make_uncertain, probe_until_settled

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

RECIPIENT = "bo@example.com"
BODY = "Your parcel left the depot."


def send_notification(sandbox: str, body: str, recipient: str = RECIPIENT) -> dict:
    answer = requests.post(
        f"{sandbox}notifications", json={"recipient": recipient, "body": body}, timeout=5
    )
    answer.raise_for_status()
    return answer.json()


@pytest.fixture
def dropped(sandbox):
    """A notification sent once before this write, then this write: its request reached the
    notifier (which sent it) but the answer was lost, and the probes read the recipient's
    messages."""
    tenant = make_tenant()
    earlier = send_notification(sandbox, BODY)
    action = approved(tenant, tool="notify.send", target=RECIPIENT, args={"body": BODY})
    case = make_uncertain(action)
    sent = send_notification(sandbox, BODY)
    other = send_notification(sandbox, "Something else entirely.")
    case = probe_until_settled(case)
    assert case.status == "open"
    return case, earlier, sent, other


def found(case):
    since = first_attempt_started(case.action_id)
    return candidates(case.findings, case.action, since=since)


def test_the_candidates_are_the_records_that_repeat_the_intent_created_after_its_attempt(
    dropped,
):
    case, earlier, sent, other = dropped
    listed = found(case)
    by_id = {candidate.record_id: candidate for candidate in listed.found}
    assert set(by_id) == {sent["receipt_id"], other["receipt_id"]}
    assert earlier["receipt_id"] not in by_id
    assert by_id[sent["receipt_id"]].matches == ("target", "body")
    assert by_id[other["receipt_id"]].matches == ("target",)
    assert by_id[sent["receipt_id"]].after.total_seconds() >= 0
    assert listed.earlier == 1  # the identical message sent before the attempt started
    # Each record once, from the first probe that read it, although every probe read it.
    assert len(case.findings) == 3
    assert {candidate.probe for candidate in listed.found} == {1}


def test_picking_the_record_resolves_as_applied_and_keeps_the_record(dropped):
    case, _, sent, _ = dropped
    choice = next(c for c in found(case).found if c.record_id == sent["receipt_id"])
    reconciler = make_user(case.tenant, "reconciler")
    resolved = case_resolve(
        case=case,
        user=reconciler,
        resolution="applied",
        note="the notifier lists it",
        evidence={"probe": choice.probe, "index": choice.index},
    )
    action = Action.objects.select_related("receipt").get(pk=case.action_id)
    assert (resolved.status, action.status) == ("resolved", "succeeded")
    assert (action.receipt.source, action.receipt.receipt_id) == ("reconciler", sent["receipt_id"])
    assert action.receipt.status == "observed"
    assert resolved.evidence == {
        "probe": choice.probe,
        "index": choice.index,
        "record": choice.record,
    }


def test_a_record_created_before_the_attempt_cannot_be_picked(dropped):
    case, earlier, _, _ = dropped
    index = next(
        place
        for place, record in enumerate(read_records(case.findings[0]["read"]))
        if record["receipt_id"] == earlier["receipt_id"]
    )
    with pytest.raises(ResolutionRefused, match=f"probe #1 read no record #{index + 1}"):
        case_resolve(
            case=case,
            user=make_user(case.tenant, "reconciler"),
            resolution="applied",
            note="that one",
            evidence={"probe": 1, "index": index},
        )
    case.refresh_from_db()
    assert (case.status, Action.objects.get(pk=case.action_id).status) == ("open", "uncertain")


def test_a_receipt_id_without_a_digest_stands_as_the_reconcilers_word(dropped):
    """The notifier's list carries no digest: the form must not demand one."""
    case, _, sent, _ = dropped
    resolved = case_resolve(
        case=case,
        user=make_user(case.tenant, "reconciler"),
        resolution="applied",
        note="the notifier lists it",
        evidence={"receipt_id": sent["receipt_id"]},
    )
    receipt = Action.objects.select_related("receipt").get(pk=case.action_id).receipt
    assert (resolved.status, receipt.receipt_id, receipt.status) == (
        "resolved",
        sent["receipt_id"],
        "attested",
    )


def test_a_receipt_id_the_probes_saw_with_another_digest_is_refused(sandbox):
    """The ticket system answers this write's key with a receipt for other arguments (its
    digest is another intent's): typing that receipt's id without the digest does not make
    it this write's."""
    tenant = make_tenant()
    action = approved(tenant, tool="ticket.close", target="ticket-31", args={})
    case = make_uncertain(action)
    answer = requests.post(
        f"{sandbox}tickets/ticket-31/close",
        json={"args": {"resolution": "something else"}},
        headers={"Idempotency-Key": action.idempotency_key},
        timeout=5,
    )
    answer.raise_for_status()
    case = probe_until_settled(case)
    assert case.status == "open"
    with pytest.raises(ResolutionRefused, match="proves another write"):
        case_resolve(
            case=case,
            user=make_user(tenant, "reconciler"),
            resolution="applied",
            note="it is there",
            evidence={"receipt_id": answer.json()["receipt_id"]},
        )


def test_a_confirmation_must_carry_the_record_the_probe_read(dropped):
    case, _, sent, _ = dropped
    make_policy(case.tenant, "notify.send", four_eyes=True)
    choice = next(c for c in found(case).found if c.record_id == sent["receipt_id"])
    picked = {"probe": choice.probe, "index": choice.index}
    proposed = case_resolve(
        case=case,
        user=make_user(case.tenant, "reconciler", username="first"),
        resolution="applied",
        note="listed",
        evidence=picked,
    )
    assert proposed.status == "awaiting_second"
    tampered = {**proposed.evidence, "record": {**choice.record, "body": "changed"}}
    second = make_user(case.tenant, "reconciler", username="second")
    with pytest.raises(ResolutionRefused, match="is not what it read"):
        case_resolve(
            case=proposed, user=second, resolution="applied", note="agreed", evidence=tampered
        )
    confirmed = case_resolve(
        case=proposed, user=second, resolution="applied", note="agreed", evidence=proposed.evidence
    )
    assert confirmed.status == "resolved"


def test_the_case_page_reads_the_first_attempt_beside_the_case(dropped):
    case, *_ = dropped
    assert case_by_id(case.pk, tenant=case.tenant).first_attempt_at == first_attempt_started(
        case.action_id
    )


def test_the_form_posts_a_picked_record_and_refuses_a_malformed_one(client, dropped):
    case, _, sent, _ = dropped
    client_for(client, make_user(case.tenant, "reconciler"))
    url = reverse("case_resolve", args=[case.pk])
    page = client.get(reverse("case_detail", args=[case.pk])).content.decode()
    choice = next(c for c in found(case).found if c.record_id == sent["receipt_id"])
    assert f'data-candidate="{choice.choice}"' in page
    assert "1 other record with the same values was created before" in page

    refused = client.post(
        url, {"resolution": "applied", "record": "1:x", "note": "that one"}, **HTMX
    )
    assert refused.status_code == 422
    assert "Pick a record the probes read, by its probe and place." in refused.content.decode()
    case.refresh_from_db()
    assert case.status == "open"

    resolved = client.post(
        url, {"resolution": "applied", "record": choice.choice, "note": "that one"}, **HTMX
    )
    assert resolved.status_code == 200
    assert "Resolved: applied" in resolved.content.decode()
    assert Action.objects.get(pk=case.action_id).receipt.receipt_id == sent["receipt_id"]
