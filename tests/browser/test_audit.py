"""/audit/ in a real browser: an auditor finds who approved a write, exports what is shown,
and sees an entry altered in the database named as such; and the receipts ledger fits."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from control.models import AuditEntry
from tests.browser.conftest import log_in, screenshot
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.receipts.support import approved_action, send_with_receipt, send_without_answer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def decided():
    """A tenant where olivia approved a ticket close, and ada audits."""
    tenant = make_tenant()
    make_user(tenant, "auditor", username="ada")
    olivia = make_user(tenant, "operator", username="olivia")
    action = make_action(make_run(tenant), target="ticket-7", args={"resolution": "fixed"})
    approve(action, olivia)
    return tenant, action


def test_an_auditor_filters_the_audit_log_and_exports_what_is_shown(page, decided):
    tenant, action = decided
    log_in(page, "ada", landing="/receipts/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
    page.wait_for_url(f"**{reverse('audit_log')}")
    expect(page.locator("[data-chain-status]")).to_contain_text("entries intact")
    expect(page.locator("#audit tbody tr")).not_to_have_count(0)

    page.get_by_label("Who").fill("olivia")
    page.get_by_label("Action", exact=True).select_option("action.approve")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("#audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("olivia")
    expect(rows.first).to_contain_text("action.approve")
    expect(rows.first.locator("time")).to_contain_text(" UTC")
    expect(rows.first.locator(".ago")).to_contain_text("just now")
    screenshot(page, "audit")

    with page.expect_download() as csv_download:
        page.locator("[data-export=csv]").click()
    text = Path(csv_download.value.path()).read_text(encoding="utf-8")
    lines = list(csv.DictReader(io.StringIO(text)))
    assert [(line["actor"], line["verb"]) for line in lines] == [("olivia", "action.approve")]
    assert lines[0]["object_id"] == str(action.pk)
    with page.expect_download() as jsonl_download:
        page.locator("[data-export=jsonl]").click()
    exported = [
        json.loads(line) for line in Path(jsonl_download.value.path()).read_text().splitlines()
    ]
    assert [entry["object_id"] for entry in exported] == [lines[0]["object_id"]]
    assert AuditEntry.objects.filter(tenant=tenant, verb="audit.export", actor="ada").count() == 2

    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "audit-on-a-phone")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the audit page scrolls sideways on a phone: {width} px wide"


def test_an_entry_altered_in_the_database_is_named_and_the_chain_says_where(page, decided):
    tenant, _ = decided
    granted = AuditEntry.objects.filter(tenant=tenant, verb="action.approve").get()
    AuditEntry.objects.filter(pk=granted.pk).update(actor="mallory")
    log_in(page, "ada", landing="/receipts/")
    page.goto(reverse("audit_log"))

    expect(page.locator(f"#entry-{granted.seq}")).to_contain_text("altered")
    expect(page.locator("[data-chain-status]")).to_contain_text(f"#{granted.seq}")
    page.locator("[data-verify-chain]").click()
    expect(page.locator("[data-chain-status]")).to_contain_text("chain broken")
    expect(page.locator("[data-chain-status]")).to_contain_text(f"entry #{granted.seq} was altered")
    screenshot(page, "audit-altered")


def test_the_receipts_ledger_fits_1280_px_without_scrolling_sideways(page):
    tenant = make_tenant()
    make_user(tenant, "auditor", username="ada")
    approver = make_user(tenant, "operator", username="olivia")
    for number in range(3):
        receipt_id = f"rcpt-{number}-" + "x" * 60  # long ids, as external systems make them
        send_with_receipt(approved_action(tenant, approver), receipt_id=receipt_id)
    send_without_answer(approved_action(tenant, approver))
    log_in(page, "ada", landing="/receipts/")

    for view in ("all", "unreceipted"):
        page.goto(f"{reverse('receipt_ledger')}?view={view}")
        expect(page.locator("#ledger tbody tr")).not_to_have_count(0)
        table = page.locator(".table-wrap").first
        scroll, client = table.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert scroll <= client, f"the {view} view scrolls sideways at 1280 px: {scroll} > {client}"
        screenshot(page, f"receipts-{view}")
