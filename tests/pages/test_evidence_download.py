"""/receipts/evidence.zip: an auditor downloads the bundle of a filter; it verifies offline;
a filter that does not parse exports nothing and records nothing."""

from __future__ import annotations

import io
import zipfile

import pytest
from countersign_client.verify import verify_bundle

from control.models import AuditEntry
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant():
    tenant = make_tenant()
    first = make_action(make_run(tenant), action_id="close-1", target="ticket-1")
    approve(first, make_user(tenant, "operator", username="olga"))
    execute_with_receipt(first)
    return tenant


def test_an_auditor_downloads_a_bundle_that_verifies_and_the_export_is_audited(
    client, tenant, tmp_path
):
    client.force_login(make_user(tenant, "auditor", username="audrey"))

    response = client.get("/receipts/evidence.zip", {"since": "2000-01-01T00:00"})

    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).extractall(tmp_path)
    [bundle] = list(tmp_path.iterdir())
    assert verify_bundle(bundle).intents == {"succeeded": 1}
    entry = AuditEntry.objects.get(verb="evidence.export")
    assert (entry.actor, entry.data["counts"]["intents.jsonl"]) == ("audrey", 1)


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"since": "yesterday"}, "Enter a valid date/time."),
        ({"since": "2026-12-02T00:00", "until": "2026-12-01T00:00"}, "“since” must be before"),
        ({"run": "00000000-0000-0000-0000-000000000001"}, "No run 00000000-"),
    ],
)
def test_a_filter_that_does_not_parse_exports_nothing(client, tenant, query, problem):
    client.force_login(make_user(tenant, "auditor"))

    response = client.get("/receipts/evidence.zip", query)

    assert response.status_code == 400
    assert problem in response.content.decode()
    assert not AuditEntry.objects.filter(verb="evidence.export").exists()


def test_the_ledger_offers_the_download_with_the_published_keys(client, tenant):
    client.force_login(make_user(tenant, "auditor"))

    page = client.get("/receipts/").content.decode()

    assert 'action="/receipts/evidence.zip"' in page
    assert 'href="/.well-known/countersign-keys.json"' in page
