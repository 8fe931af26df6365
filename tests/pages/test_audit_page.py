"""/audit/: the tenant's audit entries for its auditors and admins, filtered, checked, exported."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from control.foundation.audit import audit_record, entry_hash
from control.models import AuditEntry
from control.web import audit
from tests.factories import make_tenant, make_user
from tests.pages.conftest import HTMX, client_for

pytestmark = pytest.mark.django_db
PAGE = reverse("audit_log")
CSV = reverse("audit_export_csv")
JSONL = reverse("audit_export_jsonl")


@pytest.fixture
def auditor(tenant):
    return make_user(tenant, "auditor", username="ada")


@pytest.fixture
def auditor_client(client, auditor):
    return client_for(client, auditor)


def record(tenant, verb="case.resolve", actor="rita", **fields) -> AuditEntry:
    fields.setdefault("object_type", "case")
    fields.setdefault("object_id", "c-1")
    return audit_record(actor=actor, verb=verb, tenant=tenant, **fields)


def shown(response) -> list[int]:
    return [row.entry.seq for row in response.context["rows"]]


def test_an_auditor_reads_the_tenants_entries_newest_first_and_no_other_tenants(
    auditor_client, tenant
):
    first = record(tenant, reason="the notifier lists it")
    second = record(tenant, verb="approval.grant", actor="olivia", object_type="action")
    elsewhere = record(make_tenant(), reason="another tenant's")

    response = auditor_client.get(PAGE)

    assert response.status_code == 200
    seqs = shown(response)
    assert seqs.index(second.seq) < seqs.index(first.seq)
    assert elsewhere.seq not in seqs
    page = response.content.decode()
    assert "the notifier lists it" in page
    assert "another tenant&#x27;s" not in page
    assert "entries intact" in page


@pytest.mark.parametrize("role", ["operator", "reconciler"])
def test_other_roles_are_refused(client, tenant, role):
    client_for(client, make_user(tenant, role))
    assert client.get(PAGE).status_code == 403
    assert client.get(CSV).status_code == 403


def test_an_admin_reads_it_too(client, tenant):
    client_for(client, make_user(tenant, "admin"))
    assert client.get(PAGE).status_code == 200


def test_the_filters_narrow_by_who_action_object_and_time(auditor_client, tenant):
    rita = record(tenant, actor="rita", object_id="c-1")
    olivia = record(tenant, verb="approval.grant", actor="olivia", object_type="action")
    other_case = record(tenant, actor="rita", object_id="c-2")
    old = record(tenant, actor="rita", object_id="c-3")
    AuditEntry.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(days=3)
    )  # out of the time window below (its hash no longer matches: it shows as altered)

    def seqs(**query) -> set[int]:
        response = auditor_client.get(PAGE, query)
        assert response.status_code == 200
        return set(shown(response))

    assert seqs(actor="RITA") >= {rita.seq, other_case.seq, old.seq}
    assert olivia.seq not in seqs(actor="rita")
    assert seqs(verb="approval.grant") == {olivia.seq}
    assert seqs(object_type="case", object_id="c-2") == {other_case.seq}
    since = (timezone.localtime() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    within = seqs(actor="rita", since=since)
    assert rita.seq in within
    assert old.seq not in within
    choices = dict(auditor_client.get(PAGE).context["form"].fields["verb"].choices)
    assert {"case.resolve", "approval.grant"} <= set(choices)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"since": "yesterday"}, "Since: Enter a valid date/time."),
        ({"verb": "no.such.verb"}, "Select a valid choice."),
        (
            {"since": "2026-12-07T10:00:00", "until": "2026-12-06T10:00:00"},
            "&#x27;Since&#x27; is after &#x27;Until&#x27;: nothing could match.",
        ),
    ],
)
def test_a_filter_that_does_not_parse_shows_nothing_and_exports_nothing(
    auditor_client, tenant, query, message
):
    record(tenant)
    response = auditor_client.get(PAGE, query)
    assert response.status_code == 400
    page = response.content.decode()
    assert message.split(": ", 1)[-1] in page
    assert shown(response) == []
    assert "Fix the filter" in page

    before = AuditEntry.objects.count()
    export = auditor_client.get(CSV, query)
    assert export.status_code == 400
    assert export.content.decode().startswith("Nothing exported.")
    assert AuditEntry.objects.count() == before  # no export was recorded


def test_an_altered_entry_is_named_and_the_whole_chain_is_verified_on_request(
    auditor_client, tenant
):
    intact = record(tenant)
    tampered = record(tenant, reason="approved: the customer asked")
    assert "chain verified" in auditor_client.get(PAGE, {"verify": "chain"}).content.decode()

    AuditEntry.objects.filter(pk=tampered.pk).update(reason="approved: nobody asked")
    response = auditor_client.get(PAGE)

    rows = {row.entry.seq: row.intact for row in response.context["rows"]}
    assert (rows[intact.seq], rows[tampered.seq]) == (True, False)
    page = response.content.decode()
    assert f"no longer hashes to what was recorded: #{tampered.seq}" in page
    verified = auditor_client.get(PAGE, {"verify": "chain"}).content.decode()
    assert "chain broken" in verified
    assert f"entry #{tampered.seq} was altered" in verified


def test_the_pages_walk_back_by_sequence_at_the_same_cost(
    auditor_client, tenant, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(audit, "PAGE_SIZE", 3)
    entries = [record(tenant, object_id=f"c-{n}") for n in range(7)]
    first = auditor_client.get(PAGE)
    assert shown(first) == [e.seq for e in reversed(entries[-3:])]
    more = first.context["next_query"]
    with django_assert_num_queries(FIXED_QUERIES):
        second = auditor_client.get(f"{PAGE}?{more}", **HTMX)
    assert shown(second) == [e.seq for e in reversed(entries[1:4])]
    assert "<html" not in second.content.decode()  # the rows alone, for htmx to append


# Session, user, memberships, the choices of the filters, one page of entries.
FIXED_QUERIES = 5


def test_the_csv_export_holds_every_entry_the_filter_matches_and_is_audited(auditor_client, tenant):
    first = record(tenant, reason='=HYPERLINK("http://evil")', data={"resolution": "applied"})
    second = record(tenant, object_id="c-9")
    record(tenant, verb="approval.grant", actor="olivia", object_type="action")

    response = auditor_client.get(CSV, {"verb": "case.resolve"})

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [int(row["seq"]) for row in rows] == [first.seq, second.seq]  # the chain's order
    assert rows[0]["reason"].startswith("'=HYPERLINK")  # never a formula to a spreadsheet
    assert json.loads(rows[0]["data"]) == {"resolution": "applied"}
    assert rows[0]["hash"] == first.hash
    export = AuditEntry.objects.filter(verb="audit.export").get()
    assert (export.actor, export.tenant, export.data) == (
        "ada",
        tenant,
        {"format": "csv", "filter": {"verb": "case.resolve"}},
    )


def test_the_json_lines_export_is_one_entry_per_line_that_hashes_again(auditor_client, tenant):
    entry = record(tenant, data={"evidence": {"receipt_id": "ntf_1"}})
    response = auditor_client.get(JSONL, {"object_id": "c-1"})
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "seq": entry.seq,
            "tenant": str(tenant.pk),
            "created_at": entry.created_at.isoformat(),
            "actor": "rita",
            "verb": "case.resolve",
            "object_type": "case",
            "object_id": "c-1",
            "reason": "",
            "data": {"evidence": {"receipt_id": "ntf_1"}},
            "prev_hash": entry.prev_hash,
            "hash": entry.hash,
        }
    ]
    line = json.loads(lines[0])
    covered = {name: line[name] for name in line if name not in ("prev_hash", "hash")}
    assert entry_hash(prev_hash=line["prev_hash"], fields=covered) == line["hash"]
