"""export_evidence writes a bundle that countersign-verify checks offline; one flipped byte
in a decision view, a receipt, a chain link, an audit entry or a signature breaks it, and the
verifier names the record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from countersign_client.verify import Broken, digest, verify_bundle
from django.core.management import call_command
from django.core.management.base import CommandError

from control.foundation import evidence_keys
from control.foundation.canonical import canonical_json
from control.models import AuditEntry
from runs.models import Statement
from tests.evidence.scenario import every_kind_of_decision

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


@pytest.fixture
def scenario(sandbox):
    return every_kind_of_decision()


@pytest.fixture
def bundle(scenario, tmp_path) -> Path:
    directory = tmp_path / "bundle"
    call_command("export_evidence", tenant=scenario.tenant.name, output=str(directory))
    return directory


def _lines(bundle: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (bundle / name).read_text().splitlines()]


def _write(bundle: Path, name: str, rows: list[dict]) -> None:
    text = "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows)
    (bundle / name).write_text(text)


def _statement(rows: list[dict], action, kind: str) -> dict:
    [row] = [r for r in rows if r["body"]["action"] == str(action.pk) and r["body"]["kind"] == kind]
    return row


def _resign(row: dict) -> None:
    """What only the holder of the server's private key could do: sign an altered body."""
    payload = canonical_json(row["body"])
    row["key_id"], row["signature"] = evidence_keys.sign(payload)
    row["hash"] = digest(row["body"])


def _broken(bundle: Path) -> Broken:
    with pytest.raises(Broken) as raised:
        verify_bundle(bundle)
    return raised.value


def test_a_tenant_with_every_kind_of_decision_verifies_offline(scenario, bundle):
    report = verify_bundle(bundle)

    assert report.intents == {
        "succeeded": 4,  # approved, edited, by the rule, reconciled as applied
        "superseded": 1,  # the original of the edited one
        "rejected": 1,
        "expired": 1,
        "approved": 1,  # the plan's item, approved, not yet executed
    }
    rows = _lines(bundle, "statements.jsonl")
    assert report.statements == len(rows) == Statement.objects.count()
    kinds = {row["body"]["kind"] for row in rows}
    assert kinds == {"decision", "executed", "never_sent", "uncertain", "resolved"}
    rule = _statement(rows, scenario.by_rule, "decision")["body"]
    assert rule["decider"]["kind"] == "rule"
    assert rule["policy"]["standing_rule"]["name"]
    edited = _statement(rows, scenario.edited, "decision")["body"]
    assert edited["edited_from"]["args"] == {"resolution": "fixed"}
    assert edited["view"]["args"] == {"resolution": "duplicate"}
    plan = [r["body"] for r in rows if r["body"].get("plan_digest") == scenario.plan.digest]
    assert plan
    assert plan[0]["view"]["items"][0]["tool"] == "notify.send"
    never = _statement(rows, scenario.rejected, "never_sent")["body"]
    assert (never["status"], never["attempts"]) == ("rejected", 0)
    assert report.summary().startswith(f"OK: tenant {scenario.tenant.name}: ")


def test_the_decision_names_its_audit_entry_and_how_the_approver_signed_in(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    decision = _statement(rows, scenario.approved, "decision")["body"]
    entry = AuditEntry.objects.get(seq=decision["audit"]["seq"])

    assert (entry.verb, entry.object_id, entry.hash) == (
        "action.approve",
        str(scenario.approved.pk),
        decision["audit"]["hash"],
    )
    assert decision["decider"] == {"kind": "person", "name": "olga", "authenticated": "session"}
    assert decision["view"]["summary"]
    assert decision["view_digest"] == digest(decision["view"])


def test_a_flipped_byte_in_a_decision_view_is_named(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    row = _statement(rows, scenario.approved, "decision")
    row["body"]["view"]["target"] = "ticket-9"
    _write(bundle, "statements.jsonl", rows)

    broken = _broken(bundle)

    assert "(statement 1, decision, of intent close-1 " in broken.record
    assert "does not hash to its recorded hash" in broken.problem


def test_a_view_signed_again_still_has_to_match_its_digest(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    row = _statement(rows, scenario.approved, "decision")
    row["body"]["view"]["args"] = {"resolution": "wontfix"}
    _resign(row)
    _write(bundle, "statements.jsonl", rows)

    broken = _broken(bundle)

    assert "decision, of intent close-1" in broken.record
    assert broken.problem == "the decision view does not hash to the digest it names"


def test_a_flipped_byte_in_a_receipt_is_named(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    _statement(rows, scenario.by_rule, "executed")["body"]["receipt"]["receipt_id"] = "rcpt-rulf"
    _write(bundle, "statements.jsonl", rows)

    broken = _broken(bundle)

    assert "(statement 2, executed, of intent refund " in broken.record


def test_a_receipt_of_another_intent_signed_again_is_refused(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    row = _statement(rows, scenario.approved, "executed")
    row["body"]["receipt"]["intent_digest"] = scenario.rejected.intent_digest
    _resign(row)
    _write(bundle, "statements.jsonl", rows)

    assert _broken(bundle).problem == "the receipt carries another intent's digest"


def test_a_missing_or_relinked_statement_breaks_the_chain(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    uncertain = _statement(rows, scenario.reconciled, "uncertain")
    _write(bundle, "statements.jsonl", [row for row in rows if row is not uncertain])

    broken = _broken(bundle)
    assert "executed, of intent tell-bo" in broken.record
    assert broken.problem == "the chain expects statement 2 here: one is missing"

    executed = _statement(rows, scenario.reconciled, "executed")
    executed["body"]["prev"] = "sha256:" + "1" * 64
    _resign(executed)
    _write(bundle, "statements.jsonl", rows)
    assert _broken(bundle).problem == "the statement does not link to the one before it"


def test_a_flipped_byte_in_a_signature_is_named(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    row = _statement(rows, scenario.expired, "never_sent")
    signature = row["signature"]
    row["signature"] = ("B" if signature[0] != "B" else "C") + signature[1:]
    _write(bundle, "statements.jsonl", rows)

    broken = _broken(bundle)

    assert "never_sent, of intent tell " in broken.record
    assert broken.problem == "the signature does not verify"


def test_an_altered_audit_entry_is_named(scenario, bundle):
    entries = _lines(bundle, "audit.jsonl")
    entries[0]["actor"] = "mallory"
    _write(bundle, "audit.jsonl", entries)

    broken = _broken(bundle)

    assert broken.record == f"audit.jsonl line 1 (audit entry #{entries[0]['seq']})"
    assert "does not hash to its recorded hash" in broken.problem


def test_a_rejected_intent_whose_never_sent_statement_is_gone_is_named(scenario, bundle):
    rows = _lines(bundle, "statements.jsonl")
    never = _statement(rows, scenario.rejected, "never_sent")
    _write(bundle, "statements.jsonl", [row for row in rows if row is not never])

    broken = _broken(bundle)

    assert broken.record.endswith("(intent close-3)")
    assert broken.problem == "the intent is rejected but no statement says it was not sent"


def test_a_file_changed_outside_its_records_fails_the_manifest(scenario, bundle):
    # The same entries, spelled with other whitespace: every record still holds.
    entries = _lines(bundle, "audit.jsonl")
    (bundle / "audit.jsonl").write_text(
        "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
    )

    broken = _broken(bundle)

    assert broken.record == "audit.jsonl"
    assert broken.problem == "the file is not the one the manifest signed (its digest differs)"


def test_the_command_line_pins_the_published_keys_and_exits_non_zero_naming_a_break(
    scenario, bundle, client, tmp_path
):
    published = client.get("/.well-known/countersign-keys.json")
    assert published.status_code == 200
    keys = tmp_path / "keys.json"
    keys.write_bytes(published.content)
    command = [sys.executable, "-m", "countersign_client.verify", str(bundle)]

    clean = subprocess.run([*command, "--keys", str(keys)], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert "under the keys given with --keys" in clean.stdout

    others = tmp_path / "others.json"
    others.write_text(json.dumps({"keys": [{**published.json()["keys"][0], "kid": "other"}]}))
    untrusted = subprocess.run([*command, "--keys", str(others)], capture_output=True, text=True)
    assert untrusted.returncode == 1
    assert "BROKEN: manifest.json: signed with key 'test-ed-2', which is not trusted" in (
        untrusted.stderr
    )


def test_the_published_keys_are_every_configured_key_signing_one_first(client):
    keys = client.get("/.well-known/countersign-keys.json").json()["keys"]

    assert [(key["kid"], key["status"]) for key in keys] == [
        ("test-ed-2", "signing"),
        ("test-ed-1", "verifying"),
    ]
    assert all(key["kty"] == "OKP" and key["crv"] == "Ed25519" for key in keys)


def test_a_run_alone_exports_its_intents_only(scenario, tmp_path):
    directory = tmp_path / "one-run"
    call_command(
        "export_evidence",
        tenant=scenario.tenant.name,
        run_id=str(scenario.rejected.run_id),
        output=str(directory),
    )

    assert verify_bundle(directory).intents == {"rejected": 1}


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"tenant": "nobody"}, "no tenant 'nobody'"),
        ({"since": "yesterday"}, "--since 'yesterday' is not an ISO 8601 time"),
        ({"since": "2026-12-02", "until": "2026-12-01"}, "--since must be before --until"),
        ({"run_id": "not-a-run"}, "--run 'not-a-run' is not a run id"),
    ],
)
def test_the_command_refuses_bad_options_and_writes_nothing(scenario, tmp_path, options, refusal):
    directory = tmp_path / "refused"
    with pytest.raises(CommandError, match=refusal):
        call_command(
            "export_evidence", **{"tenant": scenario.tenant.name, **options}, output=str(directory)
        )

    assert not directory.exists()


def test_an_existing_directory_is_never_written_into(scenario, bundle):
    before = sorted(path.name for path in bundle.iterdir())

    with pytest.raises(CommandError, match="exists already"):
        call_command("export_evidence", tenant=scenario.tenant.name, output=str(bundle))

    assert sorted(path.name for path in bundle.iterdir()) == before
    assert [path.name for path in bundle.parent.iterdir()] == ["bundle"]
