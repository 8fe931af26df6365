"""/receipts/: the ledger and its views of what is missing or wrong, scoped to one tenant."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from control.models import AuditEntry
from runs.models import Action, Receipt
from runs.pages import receipts
from runs.selectors import ledger as ledger_selectors
from runs.selectors import ledger_rows
from tests.factories import make_action, make_run, make_user
from tests.receipts.support import (
    approved_action,
    send_with_receipt,
    send_without_answer,
)

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _ids(response) -> list:
    return [row.pk for row in response.context["page"].rows]


def _unproven_receipt(action: Action, *, receipt_id: str) -> Receipt:
    """No service records a receipt without settling its action; this row stands for one
    written by a bug or by hand, which is what the unproven view exists to find."""
    return Receipt.objects.create(
        tenant_id=action.tenant_id,
        action=action,
        idempotency_key=action.idempotency_key,
        intent_digest=action.intent_digest,
        receipt_id=receipt_id,
        status="closed",
        source=Receipt.Source.RECONCILER,
    )


@pytest.fixture
def ledger(tenant, approver):
    """One of each: a proven receipt, a key proven twice, a sent intent with no receipt, an
    uncertain action carrying a receipt, and an approved intent never sent."""
    proven = send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-proven")
    first = send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-first")
    # The external system answered the second intent (same digest) with the first one's key.
    second = send_with_receipt(
        approved_action(tenant, approver),
        receipt_id="rcpt-second",
        echoed_key=first.idempotency_key,
    )
    in_doubt = send_without_answer(approved_action(tenant, approver))
    orphan_action = send_without_answer(approved_action(tenant, approver))
    orphan = _unproven_receipt(orphan_action, receipt_id="rcpt-orphan")
    never_sent = approved_action(tenant, approver)
    return {
        "proven": proven.receipt,
        "first": first.receipt,
        "second": second.receipt,
        "in_doubt": in_doubt,
        "orphan": orphan,
        "never_sent": never_sent,
    }


def test_the_ledger_lists_every_receipt_of_the_tenant_newest_first(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"))

    assert response.status_code == 200
    expected = [ledger[name].pk for name in ("orphan", "second", "first", "proven")]
    assert _ids(response) == expected
    assert "rcpt-proven" in response.content.decode()


def test_sent_without_a_receipt_lists_actions_with_attempts_and_no_receipt(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"), {"view": "unreceipted"})

    assert _ids(response) == [ledger["in_doubt"].pk]
    row = response.context["page"].rows[0]
    assert (row.status, row.last_attempt_status) == ("uncertain", "uncertain")
    assert ledger["never_sent"].idempotency_key not in response.content.decode()


def test_receipts_without_a_succeeded_action_are_shown(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"), {"view": "unproven"})

    assert _ids(response) == [ledger["orphan"].pk]


def test_a_key_proven_by_two_receipts_shows_both(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"), {"view": "duplicates"})

    assert _ids(response) == [ledger["first"].pk, ledger["second"].pk]


def test_a_receipt_echoing_another_intents_key_is_mismatched(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"), {"view": "mismatched"})

    assert _ids(response) == [ledger["second"].pk]
    assert "the action's key is" in response.content.decode()


def test_an_unknown_view_is_a_404(auditor_client):
    assert auditor_client.get(reverse("receipt_ledger"), {"view": "secret"}).status_code == 404


def test_an_htmx_request_gets_only_the_rows(auditor_client, ledger):
    response = auditor_client.get(reverse("receipt_ledger"), **HTMX)

    body = response.content.decode()
    assert "rcpt-proven" in body
    assert "<html" not in body
    assert "<table" not in body


@pytest.mark.parametrize("role", ["auditor", "admin"])
def test_auditors_and_admins_read_the_ledger(client, tenant, role):
    client.force_login(make_user(tenant, role))

    assert client.get(reverse("receipt_ledger")).status_code == 200


@pytest.mark.parametrize("role", ["operator", "reconciler"])
def test_other_roles_are_refused_and_the_refusal_is_audited(client, tenant, role):
    person = make_user(tenant, role)
    client.force_login(person)

    response = client.get(reverse("receipt_ledger"))

    assert response.status_code == 403
    denial = AuditEntry.objects.get(verb="auth.denied")
    assert (denial.actor, denial.tenant, denial.data["path"]) == (
        person.username,
        tenant,
        "/receipts/",
    )


def test_a_visitor_without_a_session_is_sent_to_log_in(client):
    response = client.get(reverse("receipt_ledger"))

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_another_tenants_auditor_sees_none_of_its_receipts(client, ledger, other_tenant):
    theirs_approver = make_user(other_tenant, "operator")
    send_with_receipt(approved_action(other_tenant, theirs_approver), receipt_id="rcpt-globex")
    client.force_login(make_user(other_tenant, "auditor"))

    pages = [
        client.get(reverse("receipt_ledger"), {"view": view}).content.decode()
        for view in receipts.LEDGER_VIEWS
    ]
    export = b"".join(client.get(reverse("receipt_export")).streaming_content).decode()

    for text in [*pages, export]:
        for name in ("proven", "first", "second", "orphan"):
            assert ledger[name].receipt_id not in text
        assert ledger["in_doubt"].idempotency_key not in text
    assert "rcpt-globex" in pages[0]
    assert "rcpt-globex" in export


def test_a_receipt_pointing_at_another_tenants_action_is_not_shown(
    auditor_client, tenant, other_tenant, approver
):
    foreign = send_without_answer(approved_action(other_tenant, make_user(other_tenant)))
    Receipt.objects.create(
        tenant=tenant,
        action=foreign,
        idempotency_key=foreign.idempotency_key,
        intent_digest=foreign.intent_digest,
        receipt_id="rcpt-crossed",
        status="closed",
        source=Receipt.Source.RECONCILER,
    )

    for view in receipts.LEDGER_VIEWS:
        response = auditor_client.get(reverse("receipt_ledger"), {"view": view})
        assert "rcpt-crossed" not in response.content.decode()


# --- Pages cost the same queries with 3 rows or 30 ------------------------------------------

# session, user, memberships (tenant and roles), the page's rows.
PAGE_QUERIES = 4


def test_each_view_costs_the_same_queries_with_many_rows(
    auditor_client, tenant, approver, django_assert_num_queries
):
    for number in range(40):
        action = approved_action(tenant, approver)
        if number % 4 == 0:
            send_without_answer(action)
        elif number % 4 == 1:
            _unproven_receipt(send_without_answer(action), receipt_id=f"rcpt-{number}")
        elif number % 4 == 2:
            send_with_receipt(action, receipt_id=f"rcpt-{number}")
        else:
            proven = Action.objects.filter(tenant=tenant, status="succeeded").first()
            send_with_receipt(
                action, receipt_id=f"rcpt-{number}", echoed_key=proven.idempotency_key
            )

    for view in receipts.LEDGER_VIEWS:
        with django_assert_num_queries(PAGE_QUERIES):
            response = auditor_client.get(reverse("receipt_ledger"), {"view": view})
        assert len(response.context["page"].rows) >= 10, view


# --- Keyset pagination ------------------------------------------------------------------------


@pytest.mark.parametrize("view", list(receipts.LEDGER_VIEWS))
def test_walking_the_pages_visits_every_row_once_in_order(
    auditor_client, tenant, ledger, approver, view, monkeypatch
):
    first = ledger["first"].action
    for number in range(4):
        send_with_receipt(
            approved_action(tenant, approver),
            receipt_id=f"rcpt-extra-{number}",
            echoed_key=first.idempotency_key if number % 2 else None,
        )
        uncertain = send_without_answer(approved_action(tenant, approver))
        if number % 2:
            _unproven_receipt(uncertain, receipt_id=f"rcpt-orphan-{number}")
    monkeypatch.setattr(ledger_selectors, "LEDGER_PAGE_SIZE", 2)

    seen, query = [], {"view": view}
    for _ in range(20):
        response = auditor_client.get(reverse("receipt_ledger"), query)
        seen += _ids(response)
        cursor = response.context["page"].next_cursor
        if not cursor:
            break
        query = {"view": view, "after": cursor}

    assert seen == [row.pk for row in ledger_rows(tenant=tenant, view=view)]
    assert len(seen) > 2


def test_a_receipt_recorded_meanwhile_does_not_shift_the_next_page(
    auditor_client, tenant, approver, monkeypatch
):
    receipts = [
        send_with_receipt(approved_action(tenant, approver), receipt_id=f"rcpt-{n}").receipt
        for n in range(4)
    ]
    monkeypatch.setattr(ledger_selectors, "LEDGER_PAGE_SIZE", 2)
    first_page = auditor_client.get(reverse("receipt_ledger"))
    send_with_receipt(approved_action(tenant, approver), receipt_id="rcpt-late")

    second_page = auditor_client.get(
        reverse("receipt_ledger"), {"after": first_page.context["page"].next_cursor}
    )

    assert _ids(first_page) == [receipts[3].pk, receipts[2].pk]
    assert _ids(second_page) == [receipts[1].pk, receipts[0].pk]


def test_a_cursor_that_does_not_parse_starts_from_the_top(auditor_client, ledger):
    for view in receipts.LEDGER_VIEWS:
        top = auditor_client.get(reverse("receipt_ledger"), {"view": view})
        garbled = auditor_client.get(reverse("receipt_ledger"), {"view": view, "after": "x~y"})
        assert _ids(garbled) == _ids(top)


# --- CSV export -----------------------------------------------------------------------------


def _csv(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_export_streams_every_receipt_of_a_view_as_csv(auditor_client, ledger, monkeypatch):
    monkeypatch.setattr(ledger_selectors, "LEDGER_PAGE_SIZE", 1)

    response = auditor_client.get(reverse("receipt_export"), {"view": "duplicates"})

    assert response["Content-Type"] == "text/csv"
    assert 'filename="receipts-acme-duplicates-' in response["Content-Disposition"]
    header, *lines = _csv(response)
    assert header[:2] == ["receipt_id", "idempotency_key"]
    assert [line[0] for line in lines] == ["rcpt-first", "rcpt-second"]
    assert {line[1] for line in lines} == {ledger["first"].idempotency_key}


def test_the_unreceipted_export_lists_the_sent_actions(auditor_client, ledger):
    header, *lines = _csv(auditor_client.get(reverse("receipt_export"), {"view": "unreceipted"}))

    assert header[:2] == ["run_id", "action_id"]
    assert [(line[0], line[8]) for line in lines] == [(str(ledger["in_doubt"].run_id), "uncertain")]


def test_each_export_is_in_the_audit_chain(auditor_client, auditor, tenant, ledger):
    _csv(auditor_client.get(reverse("receipt_export"), {"view": "unproven"}))

    entry = AuditEntry.objects.get(verb="receipts.export")
    assert (entry.actor, entry.tenant, entry.object_id) == (auditor.username, tenant, "unproven")


def test_a_receipt_id_that_looks_like_a_formula_is_exported_as_text(
    auditor_client, tenant, approver
):
    send_with_receipt(approved_action(tenant, approver), receipt_id='=HYPERLINK("http://x")')
    send_with_receipt(approved_action(tenant, approver), receipt_id="-2+3")

    _, *lines = _csv(auditor_client.get(reverse("receipt_export")))

    assert [line[0] for line in lines] == ["'-2+3", '\'=HYPERLINK("http://x")']
    assert lines[0][4] == "2"


def test_the_export_costs_the_same_queries_with_many_rows(
    auditor_client, tenant, approver, django_assert_num_queries
):
    for number in range(12):
        send_with_receipt(approved_action(tenant, approver), receipt_id=f"rcpt-{number}")

    # session, user, memberships; the audit row (savepoint, head lock, insert, head update,
    # release); the rows through one server-side cursor.
    with django_assert_num_queries(9):
        lines = _csv(auditor_client.get(reverse("receipt_export")))

    assert len(lines) == 13


def test_an_intent_never_sent_is_in_no_view(auditor_client, tenant, approver):
    make_action(make_run(tenant), action_id="proposed-only")

    for view in receipts.LEDGER_VIEWS:
        response = auditor_client.get(reverse("receipt_ledger"), {"view": view})
        assert _ids(response) == []
