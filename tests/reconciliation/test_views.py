"""The reconciliation pages: the queue and one case; each resolution and "probe now" three ways
(plain POST, htmx POST, a user of another tenant), and people without the role.

Cases are reached through the real services (tests/reconciliation/test_cases.py): an
uncertain write, then its automatic probes. Unless a test serves the sandbox, the sandbox is
unreachable, so every probe records its error and proves nothing: the case opens for a person.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from control.models import AuditEntry
from reconciliation import selectors
from reconciliation.models import ReconciliationCase
from reconciliation.services import case_open, case_resolve
from runs.models import Action
from runs.services import lease_claim, lease_release, protocol, recovery
from runs.tools.calls import ToolReceipt
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user
from tests.pages.conftest import HTMX, client_for, flashed
from tests.reconciliation.test_cases import (
    approved,
    make_uncertain,
    probe_until_settled,
    send_as_the_lost_request_did,
)

pytestmark = pytest.mark.django_db

UNREACHABLE_SANDBOX = "http://127.0.0.1:9/sandbox/"
QUEUE = "/reconciliation/"
OTHER_DIGEST = "sha256:" + "0" * 64


@pytest.fixture(autouse=True)
def sandbox_down(settings):
    settings.SANDBOX_URL = UNREACHABLE_SANDBOX


@pytest.fixture
def tenant():
    return make_tenant()


@pytest.fixture
def reconciler(tenant):
    return make_user(tenant, "reconciler", username="rita")


@pytest.fixture
def reconciler_client(client, reconciler):
    return client_for(client, reconciler)


def open_case(tenant, **fields) -> ReconciliationCase:
    """A write whose outcome no probe could prove: it waits for a person."""
    fields.setdefault("tool", "notify.send")
    fields.setdefault("target", "ana@example.com")
    fields.setdefault("args", {"body": "Your refund is on its way."})
    case = probe_until_settled(make_uncertain(approved(tenant, **fields)))
    assert case.status == "open"
    return case


def timed_out_case(tenant, **fields) -> ReconciliationCase:
    """As make_uncertain, but the request was sent and no answer came in time."""
    action = approved(tenant, **fields)
    lease = lease_claim(run_id=action.run_id, owner="test-worker")
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="test-worker")
    detail = "no answer from http://sandbox/notifications in time: Read timed out."
    recovery.attempt_unknown(
        attempt_pk=attempt.pk,
        lease=lease,
        worker="test-worker",
        error_class="tool_result_uncertain",
        detail=detail,
    )
    recovery.action_uncertain(
        action_pk=action.pk,
        lease=lease,
        worker="test-worker",
        reason="tool_result_uncertain",
        detail="the tool cannot be queried by key; a human must check",
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    return probe_until_settled(case_open(action=action))


def probing_case(tenant, **fields) -> ReconciliationCase:
    fields.setdefault("target", "ticket-21")
    case = make_uncertain(approved(tenant, **fields))
    assert case.status == "probing"
    return case


def case_url(case: ReconciliationCase) -> str:
    return reverse("case_detail", args=[case.pk])


def resolve_url(case: ReconciliationCase) -> str:
    return reverse("case_resolve", args=[case.pk])


def probe_url(case: ReconciliationCase) -> str:
    return reverse("case_probe_now", args=[case.pk])


def fresh(case: ReconciliationCase) -> ReconciliationCase:
    return ReconciliationCase.objects.select_related("action", "run").get(pk=case.pk)


def receipt_evidence(case: ReconciliationCase, **changes) -> dict:
    return {
        "receipt_id": "ntf_1",
        "intent_digest": case.action.intent_digest,
        "note": "the notifier lists it",
        **changes,
    }


# --- The queue --------------------------------------------------------------------------------


def test_the_queue_lists_each_open_case_with_age_tool_target_run_and_reason(
    reconciler_client, tenant
):
    case = open_case(tenant)

    page = reconciler_client.get(QUEUE).content.decode()

    assert reverse("case_list") == QUEUE
    assert case_url(case) in page
    assert "notify.send" in page
    assert "ana@example.com" in page
    assert reverse("run_detail", args=[case.run_id]) in page
    assert case.run.goal in page
    assert "dropped connection" in page
    assert "connection dropped" in page
    assert "<strong>1</strong> waiting for a person" in page
    assert f'datetime="{case.opened_at:%Y-%m-%dT%H:%M:%S}' in page


def test_cases_still_probed_show_apart_as_being_probed_automatically(reconciler_client, tenant):
    waiting = open_case(tenant)
    probing = probing_case(tenant)

    page = reconciler_client.get(QUEUE).content.decode()

    head, probed_part = page.split("Being probed automatically <span", 1)
    assert case_url(waiting) in head
    assert case_url(probing) not in head
    assert case_url(probing) in probed_part
    assert "<strong>1</strong> being probed automatically" in page


def test_the_queue_filters_by_tool_reason_and_status_and_counts_each(reconciler_client, tenant):
    make_policy(tenant, "ticket.close", four_eyes=True)
    notify = open_case(tenant)
    timed_out = timed_out_case(
        tenant, tool="notify.send", target="bo@example.com", args={"body": "Hi"}
    )
    ticket = open_case(tenant, tool="ticket.close", target="ticket-9", args={"resolution": "ok"})
    proposer = make_user(tenant, "reconciler")
    case_resolve(case=fresh(ticket), user=proposer, resolution="abandon", note="duplicate")

    def shown(query: dict) -> set:
        page = reconciler_client.get(QUEUE, query).content.decode()
        return {c.pk for c in (notify, timed_out, ticket) if case_url(c) in page}

    assert shown({}) == {notify.pk, timed_out.pk, ticket.pk}
    assert shown({"tool": "ticket.close"}) == {ticket.pk}
    assert shown({"reason": "timeout_after_send"}) == {timed_out.pk}
    assert shown({"reason": "dropped_connection"}) == {notify.pk, ticket.pk}
    assert shown({"status": "awaiting_second"}) == {ticket.pk}
    assert shown({"status": "open", "tool": "notify.send"}) == {notify.pk, timed_out.pk}
    page = reconciler_client.get(QUEUE, {"tool": "notify.send"}).content.decode()
    assert "<strong>2</strong> match the filters" in page
    assert ">notify.send (2)</option>" in page
    assert ">timeout after send (1)</option>" in page
    assert ">Awaiting a second reconciler (1)</option>" in page
    unfiltered = reconciler_client.get(QUEUE).content.decode()
    assert f"{proposer.username} proposed abandon" in unfiltered


def test_an_empty_queue_says_what_is_going_on(reconciler_client, tenant):
    probing_case(tenant)

    page = reconciler_client.get(QUEUE).content.decode()

    assert "No write waits for a reconciler" in page
    assert "queries the tool by the" in page
    assert "1 being probed right now" in page
    filtered = reconciler_client.get(QUEUE, {"tool": "ticket.close"}).content.decode()
    assert "No write waits for a reconciler" in filtered
    open_case(tenant)
    filtered = reconciler_client.get(QUEUE, {"tool": "ticket.close"}).content.decode()
    assert "No case matches these filters" in filtered


def test_an_htmx_queue_request_renders_the_table_alone(reconciler_client, tenant):
    case = open_case(tenant)

    page = reconciler_client.get(QUEUE, **HTMX).content.decode()

    assert page.lstrip().startswith('<div id="case-table"')
    assert case_url(case) in page
    assert "<html" not in page


def test_the_queue_shows_only_this_tenants_cases(reconciler_client):
    theirs = open_case(make_tenant())

    page = reconciler_client.get(QUEUE).content.decode()

    assert case_url(theirs) not in page
    assert "No write waits for a reconciler" in page


@pytest.mark.parametrize("role", ["operator", "auditor", "reconciler", "admin"])
def test_every_role_of_the_tenant_reads_the_queue_and_the_case(client, tenant, role):
    case = open_case(tenant)
    client_for(client, make_user(tenant, role))

    assert client.get(QUEUE).status_code == 200
    page = client.get(case_url(case)).content.decode()

    may_resolve = role in ("reconciler", "admin")
    assert (resolve_url(case) in page) is may_resolve
    assert (probe_url(case) in page) is may_resolve
    assert ("Your role here reads them" in page) is not may_resolve


def test_a_person_without_a_role_in_the_tenant_is_refused(client, tenant):
    case = open_case(tenant)
    client.force_login(get_user_model().objects.create_user("nobody"))

    assert client.get(QUEUE).status_code == 403
    assert client.get(case_url(case)).status_code == 403
    assert client.post(resolve_url(case), {"resolution": "abandon", "note": "x"}).status_code == 403


def test_an_anonymous_visitor_is_sent_to_log_in(client, tenant):
    case = open_case(tenant)

    response = client.get(case_url(case))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_queue_walks_its_keyset_pages_oldest_first(reconciler_client, tenant, monkeypatch):
    cases = [open_case(tenant, target=f"n{number}@example.com") for number in range(3)]
    monkeypatch.setattr(selectors, "PAGE_SIZE", 2)

    first = reconciler_client.get(QUEUE).content.decode()
    next_url = first.split('<nav class="pager" aria-label="Pages"><a href="')[1].split('"')[0]
    second = reconciler_client.get(next_url.replace("&amp;", "&")).content.decode()

    assert [case_url(c) in first for c in cases] == [True, True, False]
    assert [case_url(c) in second for c in cases] == [False, False, True]
    assert "Newer cases" not in second


# --- One case ---------------------------------------------------------------------------------


def test_the_case_page_shows_the_frozen_intent_escaped_its_attempts_and_every_probe(
    reconciler_client, tenant
):
    case = open_case(tenant, args={"body": "Refund <b>sent</b> & done"})
    action = case.action

    page = reconciler_client.get(case_url(case)).content.decode()

    assert "&quot;body&quot;: &quot;Refund &lt;b&gt;sent&lt;/b&gt; &amp; done&quot;" in page
    assert "<b>sent</b>" not in page
    assert action.idempotency_key in page
    assert action.intent_digest in page
    assert "tool_result_uncertain" in page
    assert "connection dropped" in page
    assert page.count('<li id="finding-') == 3
    assert "this tool cannot be queried by key" in page
    assert "transient: could not read" in page
    assert "notify · http — a resend is a second effect, cannot be queried" in page
    assert "declares no compensation" in page
    assert "case.open" in page


def test_the_case_page_says_the_intents_connector_and_what_its_tool_declares(
    reconciler_client, tenant
):
    case = open_case(
        tenant, tool="payment.charge", target="cus_42", args={"amount_cents": 5, "currency": "EUR"}
    )

    page = reconciler_client.get(case_url(case)).content.decode()

    assert (
        "payment · http — dedupes by key, can be queried by key, undone by payment.refund" in page
    )


def test_a_case_whose_tool_is_no_longer_configured_says_so_instead_of_failing(
    reconciler_client, tenant, settings
):
    case = open_case(tenant)
    settings.SANDBOX_ENABLED = False

    response = reconciler_client.get(case_url(case))

    assert response.status_code == 200
    page = response.content.decode()
    assert "tool not configured on this server" in page
    assert "a resend is a second effect" not in page
    assert 'id="resolve-compensate"' not in page


def test_the_case_page_shows_the_runs_other_effects_with_their_receipts(reconciler_client, tenant):
    run = make_run(tenant)
    earlier = approved_in(run, action_id="close-first", target="ticket-30")
    settle_with_receipt(earlier)
    case = open_case_in(run, action_id="notify", tool="notify.send", target="x@example.com")

    page = reconciler_client.get(case_url(case)).content.decode()

    effects = page.split('id="effects-title"', 1)[1]
    assert "close-first" in effects
    assert "rcpt-close-first" in effects
    assert "digest matches" in effects


def approved_in(run, **fields) -> Action:
    action = make_action(run, **fields)
    approve(action, make_user(run.tenant, "operator"))
    return action


def settle_with_receipt(action: Action) -> None:
    lease = lease_claim(run_id=action.run_id, owner="test-worker")
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="test-worker")
    protocol.receipt_record(
        action_pk=action.pk,
        lease=lease,
        receipt=ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=f"rcpt-{action.action_id}",
            target_version=2,
            status="closed",
            raw_response_hash=OTHER_DIGEST,
        ),
        source="response",
        worker="test-worker",
        attempt_pk=attempt.pk,
    )
    lease_release(lease=lease)


def open_case_in(run, **fields) -> ReconciliationCase:
    fields.setdefault("args", {"body": "Hello"})
    case = probe_until_settled(make_uncertain(approved_in(run, **fields)))
    assert case.status == "open"
    return case


def test_another_tenants_case_is_not_found(reconciler_client):
    theirs = open_case(make_tenant())

    assert reconciler_client.get(case_url(theirs)).status_code == 404


def test_an_htmx_refresh_of_a_case_renders_the_live_part_alone(reconciler_client, tenant):
    case = probing_case(tenant)

    page = reconciler_client.get(case_url(case), **HTMX).content.decode()

    assert page.lstrip().startswith('<div id="case-live"')
    assert 'hx-trigger="every 3s"' in page
    assert "Being probed automatically" in page


# --- Applied ----------------------------------------------------------------------------------


def test_a_plain_applied_resolution_with_a_receipt_redirects_and_records_it(
    reconciler_client, tenant, reconciler
):
    case = open_case(tenant)

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "applied", **receipt_evidence(case)}
    )

    assert response.status_code == 302
    assert response["Location"] == case_url(case)
    assert any("Resolved as applied" in message for message in flashed(response))
    case = fresh(case)
    assert (case.status, case.resolution, case.resolved_by) == ("resolved", "applied", reconciler)
    assert case.evidence == {"receipt_id": "ntf_1", "intent_digest": case.action.intent_digest}
    assert (case.action.status, case.action.receipt.source) == ("succeeded", "reconciler")
    audit = AuditEntry.objects.get(verb="case.resolve", object_id=str(case.pk))
    assert (audit.actor, audit.reason) == ("rita", "the notifier lists it")


def test_an_htmx_applied_resolution_renders_the_resolved_case(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "applied", **receipt_evidence(case)}, **HTMX
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="case-live"')
    assert "Resolved as applied." in page
    assert "Resolved: applied" in page
    assert resolve_url(case) not in page
    assert fresh(case).status == "resolved"


def test_resolving_another_tenants_case_is_not_found(reconciler_client):
    theirs = open_case(make_tenant())

    response = reconciler_client.post(
        resolve_url(theirs), {"resolution": "applied", **receipt_evidence(theirs)}, **HTMX
    )

    assert response.status_code == 404
    assert fresh(theirs).status == "open"


@pytest.mark.parametrize("role", ["operator", "auditor"])
def test_an_operator_or_auditor_may_not_resolve(client, tenant, role):
    case = open_case(tenant)
    client_for(client, make_user(tenant, role))

    response = client.post(resolve_url(case), {"resolution": "abandon", "note": "stop"}, **HTMX)

    assert response.status_code == 403
    assert fresh(case).status == "open"


def test_an_applied_resolution_without_evidence_is_refused_with_the_reason(
    reconciler_client, tenant
):
    case = open_case(tenant)

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "applied", "note": "I think so"}, **HTMX
    )

    assert response.status_code == 409
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="case-live"')
    assert "Evidence is required" in page
    assert "Nothing was resolved." in page
    assert 'id="resolve-applied" open' in page
    assert "I think so</textarea>" in page
    assert fresh(case).status == "open"


def test_a_receipt_whose_digest_differs_is_refused_and_says_so(reconciler_client, tenant):
    case = open_case(tenant)
    posted = {"resolution": "applied", **receipt_evidence(case, intent_digest=OTHER_DIGEST)}

    response = reconciler_client.post(resolve_url(case), posted, **HTMX)

    assert response.status_code == 409
    page = response.content.decode()
    assert "it proves another write" in page
    assert f'value="{OTHER_DIGEST}"' in page
    assert (fresh(case).status, fresh(case).action.status) == ("open", "uncertain")


def test_a_plain_refusal_redirects_with_the_reason_as_a_message(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(resolve_url(case), {"resolution": "applied", "note": "x"})

    assert response.status_code == 302
    assert response["Location"] == case_url(case)
    assert any("Evidence is required" in message for message in flashed(response))
    assert fresh(case).status == "open"


def test_applied_with_the_observed_state_as_evidence(reconciler_client, tenant):
    case = open_case(tenant)
    observed = "the notifier's outbox lists it, sent 10:02"

    reconciler_client.post(
        resolve_url(case),
        {"resolution": "applied", "observed_state": observed, "note": "seen"},
        **HTMX,
    )

    case = fresh(case)
    assert (case.status, case.evidence) == ("resolved", {"observed_state": observed})
    assert case.action.receipt.receipt_id == f"observed:{case.pk}"


def test_an_unknown_resolution_is_refused_as_incomplete(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "ignore", "note": "x"}, **HTMX
    )

    assert response.status_code == 422
    assert "Select a valid choice" in response.content.decode()
    assert fresh(case).status == "open"


# --- Not applied ------------------------------------------------------------------------------


def test_not_applied_on_a_tool_that_dedupes_goes_again_with_the_same_key(reconciler_client, tenant):
    case = open_case(tenant, tool="ticket.close", target="ticket-12", args={"resolution": "ok"})
    page = reconciler_client.get(case_url(case)).content.decode()
    assert "ticket.close deduplicates by key" in page
    assert 'name="confirm_resend"' not in page

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "not_applied", "note": "the ticket is open"}, **HTMX
    )

    assert response.status_code == 200
    assert "Resolved as not applied." in response.content.decode()
    case = fresh(case)
    assert (case.resolution, case.resend_confirmed) == ("not_applied", False)
    action = Action.objects.get(pk=case.action_id)
    assert (action.status, action.idempotency_key) == ("retry_wait", case.action.idempotency_key)


def test_not_applied_without_dedupe_needs_the_resend_checkbox(reconciler_client, tenant):
    case = open_case(tenant)
    posted = {"resolution": "not_applied", "note": "nothing in the notifier"}

    refused = reconciler_client.post(resolve_url(case), posted, **HTMX)
    assert refused.status_code == 409
    assert "confirm that sending it again is intended" in refused.content.decode()
    assert fresh(case).status == "open"

    accepted = reconciler_client.post(resolve_url(case), {**posted, "confirm_resend": "on"})

    assert accepted.status_code == 302
    case = fresh(case)
    assert (case.status, case.resolution, case.resend_confirmed) == (
        "resolved",
        "not_applied",
        True,
    )
    assert case.action.status == "retry_wait"


# --- Compensate -------------------------------------------------------------------------------


def charge_case(tenant) -> ReconciliationCase:
    return open_case(
        tenant,
        tool="payment.charge",
        target="cus_9",
        action_id="charge",
        args={"amount_cents": 1200, "currency": "EUR"},
    )


def test_compensate_records_the_receipt_and_proposes_the_refund_for_the_inbox(
    reconciler_client, tenant
):
    case = charge_case(tenant)
    charge_id = "ch_" + "a" * 32
    posted = {
        "resolution": "compensate",
        "receipt_id": charge_id,
        "intent_digest": case.action.intent_digest,
        "note": "the customer cancelled the order",
    }

    response = reconciler_client.post(resolve_url(case), posted, **HTMX)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Compensation proposed." in page
    inbox = f"{reverse('inbox')}?run={case.run_id}"
    assert f'href="{inbox}"' in page
    undo = Action.objects.get(run=case.run, action_id="undo-charge")
    assert (undo.tool, undo.target, undo.status) == (
        "payment.refund",
        charge_id,
        "waiting_approval",
    )
    assert "undo-charge" in page
    assert Action.objects.get(pk=case.action_id).receipt.receipt_id == charge_id


def test_compensate_is_offered_only_for_a_tool_that_declares_one(reconciler_client, tenant):
    case = open_case(tenant)
    page = reconciler_client.get(case_url(case)).content.decode()
    assert 'id="resolve-compensate"' not in page

    response = reconciler_client.post(
        resolve_url(case),
        {"resolution": "compensate", **receipt_evidence(case)},
        **HTMX,
    )

    assert response.status_code == 409
    assert "notify.send declares no compensation" in response.content.decode()


def test_compensating_with_a_receipt_the_refund_cannot_target_is_refused(reconciler_client, tenant):
    case = charge_case(tenant)
    posted = {
        "resolution": "compensate",
        "observed_state": "charged on the statement",
        "note": "undo it",
    }

    response = reconciler_client.post(resolve_url(case), posted, **HTMX)

    assert response.status_code == 409
    assert "Refused by the run" in response.content.decode()
    case = fresh(case)
    assert (case.status, case.action.status) == ("open", "uncertain")
    assert not Action.objects.filter(run=case.run, action_id="undo-charge").exists()


# --- Abandon ----------------------------------------------------------------------------------


def test_abandon_stops_the_run_as_failed_with_the_reason(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "abandon", "note": "the customer asked us to stop"}
    )

    assert response.status_code == 302
    case = fresh(case)
    case.run.refresh_from_db()
    assert (case.resolution, case.run.phase) == ("abandon", "failed")
    assert "the customer asked us to stop" in case.run.stop_reason
    page = reconciler_client.get(case_url(case)).content.decode()
    assert "Resolved: abandon" in page
    assert 'class="badge phase-failed"' in page


def test_abandon_without_a_reason_is_refused(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(resolve_url(case), {"resolution": "abandon"}, **HTMX)

    assert response.status_code == 409
    assert "Say why" in response.content.decode()


def test_a_resolution_of_a_case_resolved_meanwhile_is_refused(reconciler_client, tenant):
    case = open_case(tenant)
    reconciler_client.post(resolve_url(case), {"resolution": "abandon", "note": "stop"})

    response = reconciler_client.post(
        resolve_url(case), {"resolution": "abandon", "note": "stop"}, **HTMX
    )

    assert response.status_code == 409
    assert "Refused: the case has moved on." in response.content.decode()


# --- Four eyes --------------------------------------------------------------------------------


def test_with_four_eyes_a_second_reconciler_confirms_the_proposed_resolution(client, tenant):
    make_policy(tenant, "notify.send", four_eyes=True)
    case = open_case(tenant)
    first = make_user(tenant, "reconciler", username="first")
    second = make_user(tenant, "admin", username="second")
    client_for(client, first)

    proposed = client.post(resolve_url(case), {"resolution": "applied", **receipt_evidence(case)})
    assert proposed.status_code == 302
    assert any("waiting for a second reconciler" in m for m in flashed(proposed))
    assert fresh(case).status == "awaiting_second"
    page = client.get(case_url(case)).content.decode()
    assert "Awaiting a second reconciler: <strong>first</strong> proposed <strong>applied" in page
    assert "You proposed this" in page
    assert "data-confirm-form" not in page
    assert "Awaiting a second reconciler" in client.get(QUEUE).content.decode()

    client_for(client, second)
    page = client.get(case_url(case)).content.decode()
    assert "data-confirm-form" in page
    evidence = {"receipt_id": "ntf_1", "intent_digest": case.action.intent_digest}
    confirm = {
        "resolution": "applied",
        "confirming": "true",
        "proposed_evidence": page.split('name="proposed_evidence" value="')[1]
        .split('"')[0]
        .replace("&quot;", '"'),
        "note": "the notifier lists it",
    }
    response = client.post(resolve_url(case), confirm, **HTMX)

    assert response.status_code == 200
    assert "Resolved: applied" in response.content.decode()
    case = fresh(case)
    assert (case.status, case.proposed_by, case.resolved_by) == ("resolved", first, second)
    assert case.evidence == evidence


def test_the_proposer_cannot_confirm_their_own_resolution(client, tenant):
    make_policy(tenant, "notify.send", four_eyes=True)
    case = open_case(tenant)
    client_for(client, make_user(tenant, "reconciler"))
    client.post(resolve_url(case), {"resolution": "abandon", "note": "stop"})

    response = client.post(
        resolve_url(case),
        {"resolution": "abandon", "confirming": "true", "proposed_evidence": "null", "note": "x"},
        **HTMX,
    )

    assert response.status_code == 409
    assert "another reconciler must confirm" in response.content.decode()
    assert fresh(case).status == "awaiting_second"


# --- Probe now --------------------------------------------------------------------------------


def test_a_plain_probe_now_probes_an_open_case_once_more(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(probe_url(case))

    assert response.status_code == 302
    assert response["Location"] == case_url(case)
    assert any("Probed: nothing proven" in message for message in flashed(response))
    case = fresh(case)
    assert (case.status, case.probes, len(case.findings)) == ("open", 4, 4)
    audit = AuditEntry.objects.get(verb="case.probe_now", object_id=str(case.pk))
    assert audit.actor == "rita"


def test_an_htmx_probe_now_renders_the_case_with_the_new_finding(reconciler_client, tenant):
    case = open_case(tenant)

    response = reconciler_client.post(probe_url(case), **HTMX)

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="case-live"')
    assert "Probed: nothing proven." in page
    assert page.count('<li id="finding-') == 4
    assert "As probe #4 read it" in page


def test_probe_now_for_another_tenants_case_is_not_found(reconciler_client):
    theirs = open_case(make_tenant())

    assert reconciler_client.post(probe_url(theirs), **HTMX).status_code == 404
    assert fresh(theirs).probes == 3


def test_an_auditor_may_not_probe(client, tenant):
    case = open_case(tenant)
    client_for(client, make_user(tenant, "auditor"))

    assert client.post(probe_url(case), **HTMX).status_code == 403
    assert fresh(case).probes == 3


def test_probe_now_on_a_resolved_case_is_refused(reconciler_client, tenant):
    case = open_case(tenant)
    reconciler_client.post(resolve_url(case), {"resolution": "abandon", "note": "stop"})

    response = reconciler_client.post(probe_url(case), **HTMX)

    assert response.status_code == 409
    assert "The case is resolved: there is nothing to probe." in response.content.decode()


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_probe_now_that_finds_the_receipt_by_key_settles_the_case(client, sandbox, settings):
    tenant = make_tenant()
    settings.SANDBOX_URL = UNREACHABLE_SANDBOX  # down while the automatic probes ran
    case = open_case(tenant, tool="ticket.close", target="ticket-14", args={"resolution": "ok"})
    settings.SANDBOX_URL = sandbox
    send_as_the_lost_request_did(sandbox, case.action)
    client_for(client, make_user(tenant, "reconciler"))

    response = client.post(probe_url(case), **HTMX)

    assert response.status_code == 200
    assert "Probed: proven applied." in response.content.decode()
    case = fresh(case)
    assert (case.status, case.resolution, case.resolved_by) == ("resolved", "applied", None)
    assert case.action.receipt.source == "query"
