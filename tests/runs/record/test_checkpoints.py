"""Signed checkpoints: verified in order, every mutation refused, old versions handled."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from control.foundation import signing
from control.foundation.canonical import canonical_json
from runs.exceptions import CheckpointError
from runs.record.checkpoints import (
    SCHEMA_VERSION,
    check_invariants,
    checkpoint_verify,
    latest_checkpoint,
    sign_state,
)
from runs.record.completed import COMPLETED_GENESIS, completed_entry, completed_fold
from runs.services import lease_claim
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"


@pytest.fixture
def waiting_run():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    action.run.refresh_from_db()
    return action.run


def test_the_latest_checkpoint_verifies_and_records_the_frozen_intent(waiting_run):
    state = checkpoint_verify(latest_checkpoint(waiting_run).body, run=waiting_run)
    pending = state["pending_action"]
    assert state["phase"] == "waiting_approval"
    assert pending["idempotency_key"].startswith(str(waiting_run.pk))
    assert pending["observation"]["content_hash"].startswith("sha256:")
    assert state["state_version"] == waiting_run.state_version


def test_every_change_writes_its_checkpoint_in_the_same_transaction(waiting_run):
    versions = list(
        waiting_run.checkpoints.order_by("state_version").values_list("state_version", flat=True)
    )
    assert versions == list(range(1, waiting_run.state_version + 1))


def test_an_older_checkpoint_replayed_is_refused_as_stale(waiting_run):
    first = waiting_run.checkpoints.order_by("state_version").first()
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(first.body, run=waiting_run)
    assert error.value.step == "freshness"


def test_a_checkpoint_of_another_run_is_refused(waiting_run):
    other = make_run(waiting_run.tenant)
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(latest_checkpoint(other).body, run=waiting_run)
    assert error.value.step == "freshness"


def test_loading_under_a_lost_lease_is_refused(waiting_run):
    token = lease_claim(run_id=waiting_run.pk, owner="worker-a")
    lease_claim(run_id=waiting_run.pk, owner="worker-a")
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(latest_checkpoint(waiting_run).body, run=waiting_run, lease=token)
    assert error.value.step == "lease"


def _mutations(body: str, rng: random.Random):
    data = body.encode()
    kind = rng.randrange(4)
    if kind == 0:  # flip one bit
        position = rng.randrange(len(data))
        flipped = bytes([data[position] ^ (1 << rng.randrange(8))])
        return data[:position] + flipped + data[position + 1 :]
    if kind == 1:  # truncate
        return data[: rng.randrange(len(data))]
    if kind == 2:  # duplicate a byte
        position = rng.randrange(len(data))
        return data[:position] + data[position : position + 1] + data[position:]
    # swap two bytes
    first, second = sorted(rng.sample(range(len(data)), 2))
    if data[first] == data[second]:
        return data[:first] + b"\x00" + data[first + 1 :]
    return (
        data[:first]
        + data[second : second + 1]
        + data[first + 1 : second]
        + data[first : first + 1]
        + data[second + 1 :]
    )


def test_ten_thousand_random_mutations_are_all_refused(waiting_run):
    body = latest_checkpoint(waiting_run).body
    rng = random.Random(20261129)
    steps: dict[str, int] = {}
    for _ in range(10_000):
        mutated = _mutations(body, rng)
        assert mutated != body.encode()
        with pytest.raises(CheckpointError) as error:
            checkpoint_verify(mutated, run=waiting_run)
        steps[error.value.step] = steps.get(error.value.step, 0) + 1
    assert {"parse", "mac"} <= set(steps)


def test_a_key_id_swap_is_refused(waiting_run, settings):
    envelope = json.loads(latest_checkpoint(waiting_run).body)
    other_kid = next(k for k in settings.COUNTERSIGN_CHECKPOINT_KEYS if k != envelope["key_id"])
    envelope["key_id"] = other_kid
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(canonical_json(envelope), run=waiting_run)
    assert error.value.step == "mac"


def test_a_re_signed_state_that_breaks_an_invariant_is_refused(waiting_run):
    state = checkpoint_verify(latest_checkpoint(waiting_run).body)
    state["pending_action"]["args"] = {"resolution": "wontfix"}
    _, forged = sign_state(state)
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(forged)
    assert error.value.step == "invariants"
    assert "digest" in str(error.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.update(pending_action=None), "requires a frozen pending action"),
        (lambda s: s["pending_action"].update(observation=None), "observation"),
        (lambda s: s.update(phase="running"), "must not hold an executable pending action"),
        (lambda s: s.update(phase="executing"), "does not fit the phase"),
        (lambda s: s.update(phase="completed", pending_action=None), "evidence"),
        (lambda s: s.update(last_event_seq=s["state_version"] + 1), "event sequence"),
        (lambda s: s["budget"].update(limit=1, used=2), "budget"),
        (lambda s: s.pop("goal"), "missing field 'goal'"),
        (lambda s: s.update(approved=True), "unknown fields"),
        (lambda s: s.update(phase="done"), "unknown phase"),
    ],
)
def test_business_invariants_are_checked_beyond_types(waiting_run, edit, message):
    state = checkpoint_verify(latest_checkpoint(waiting_run).body)
    edit(state)
    with pytest.raises(CheckpointError, match=message):
        check_invariants(state)


def test_an_executing_checkpoint_carries_the_bound_approval():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    action.run.refresh_from_db()
    state = checkpoint_verify(latest_checkpoint(action.run).body, run=action.run)
    assert state["phase"] == "executing"
    assert state["approval"]["intent_digest"] == action.intent_digest
    assert state["approval"]["state_version"] == action.base_version
    del state["approval"]["expires_at"]
    with pytest.raises(CheckpointError, match="expires_at"):
        check_invariants(state)


def test_a_newer_schema_version_is_refused_with_what_to_do(waiting_run):
    envelope = json.loads(latest_checkpoint(waiting_run).body)
    envelope["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(CheckpointError, match="newer Countersign") as error:
        checkpoint_verify(json.dumps(envelope))
    assert error.value.step == "schema_version"


@pytest.mark.parametrize("version", [0, -1, "1", True, 1.0])
def test_unknown_schema_versions_are_refused(waiting_run, version):
    envelope = json.loads(latest_checkpoint(waiting_run).body)
    envelope["schema_version"] = version
    with pytest.raises(CheckpointError) as error:
        checkpoint_verify(json.dumps(envelope))
    assert error.value.step == "schema_version"


def test_the_historical_waiting_fixture_still_verifies_through_the_upgraders():
    state = checkpoint_verify((FIXTURES / "v1_waiting_approval.json").read_bytes())
    assert state["phase"] == "waiting_approval"
    assert state["pending_action"]["tool"] == "ticket.close"
    assert state["completed"] == {"count": 0, "digest": COMPLETED_GENESIS}
    assert "completed_work" not in state
    assert "completed_actions" not in state


def test_a_v1_checkpoint_with_completed_work_upgrades_to_its_count_and_digest():
    """v1 listed receipts sorted by id and their ids in completion order: the digest chains
    them in completion order, exactly as the worker chains them one receipt at a time."""
    envelope = json.loads((FIXTURES / "v1_completed.json").read_bytes())
    v1 = envelope["state"]
    by_id = {item["action_id"]: item for item in v1["completed_actions"]}
    assert list(by_id) != v1["completed_work"]  # sorted differs from completion order
    entries = [
        completed_entry(
            action_id=action_id,
            intent_digest=by_id[action_id]["intent_digest"],
            status=by_id[action_id]["status"],
            **{
                field: by_id[action_id]["receipt"][field]
                for field in ("receipt_id", "idempotency_key", "source", "target_version")
            },
        )
        for action_id in v1["completed_work"]
    ]

    state = checkpoint_verify((FIXTURES / "v1_completed.json").read_bytes())

    assert state["phase"] == "completed"
    count, digest = completed_fold(entries)
    assert state["completed"] == {"count": count, "digest": digest}
    assert state["evidence"]["receipts"] == {"close-ticket": "rcpt_close_7"}


def _signed_v1(edit) -> str:
    """The v1 completed fixture edited and signed again, as a v1 server would have."""
    state = json.loads((FIXTURES / "v1_completed.json").read_bytes())["state"]
    edit(state)
    kid = signing.current_key_id()
    kid, mac = signing.sign(canonical_json({"schema_version": 1, "key_id": kid, "state": state}))
    return json.dumps({"schema_version": 1, "key_id": kid, "mac": mac, "state": state})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["completed_actions"][0].pop("receipt"), "lacks a receipt"),
        (lambda s: s["completed_actions"][0]["receipt"].pop("source"), "missing 'source'"),
        (lambda s: s.update(completed_work=["close-ticket"]), "not in completed_work"),
        (lambda s: s.update(completed_actions={}), "must be lists"),
    ],
)
def test_a_v1_checkpoint_the_upgrader_cannot_read_is_refused_at_upgrade(edit, message):
    with pytest.raises(CheckpointError, match=message) as error:
        checkpoint_verify(_signed_v1(edit))
    assert error.value.step == "upgrade"


def test_a_v2_checkpoint_verifies_through_the_upgraders_vouching_for_no_plan():
    state = checkpoint_verify((FIXTURES / "v2_waiting_approval.json").read_bytes())
    assert state["phase"] == "waiting_approval"
    assert state["open_plan"] is None
    assert state["pending_action"]["action_id"] == "close-ticket"


def test_a_checkpoint_from_a_newer_server_is_refused_with_what_to_do():
    future = FIXTURES / "future" / "v4_from_a_newer_server.json"
    with pytest.raises(CheckpointError, match="upgrade this server") as error:
        checkpoint_verify(future.read_bytes())
    assert error.value.step == "schema_version"
    assert "v4" in str(error.value)
    assert f"v{SCHEMA_VERSION}" in str(error.value)


@pytest.mark.parametrize(
    ("completed", "message"),
    [
        ({"count": -1, "digest": COMPLETED_GENESIS}, "non-negative"),
        ({"count": True, "digest": COMPLETED_GENESIS}, "non-negative"),
        ({"count": 2, "digest": "sha256:xyz"}, "sha256:<64 hex>"),
        ({"count": 0, "digest": "sha256:" + "1" * 64}, "empty digest"),
        ({"count": 0, "digest": COMPLETED_GENESIS, "ids": []}, "exactly count and digest"),
    ],
)
def test_the_completed_work_must_be_a_count_and_a_digest(waiting_run, completed, message):
    state = checkpoint_verify(latest_checkpoint(waiting_run).body)
    state["completed"] = completed
    with pytest.raises(CheckpointError, match=message):
        check_invariants(state)


def test_a_completed_state_must_carry_the_receipts_of_its_evidence():
    state = checkpoint_verify((FIXTURES / "v1_completed.json").read_bytes())
    state["evidence"]["receipts"] = {}
    with pytest.raises(CheckpointError, match="without a receipt or read"):
        check_invariants(state)


def test_a_fixture_signed_with_a_rotated_out_key_fails_once_that_key_is_removed(settings):
    fixture = FIXTURES / "v1_waiting_approval.json"
    assert checkpoint_verify(fixture.read_bytes())["state_version"] >= 1
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"test-2": b"second-test-checkpoint-key"}
    with pytest.raises(CheckpointError, match="unknown signing key") as error:
        checkpoint_verify(fixture.read_bytes())
    assert error.value.step == "mac"


def test_the_envelope_and_its_signed_part_are_the_canonical_json_of_their_parts(waiting_run):
    """sign_state writes the state's canonical bytes once and joins the rest around them:
    the result must be exactly what canonical JSON of the whole says, MAC included."""
    state = checkpoint_verify(latest_checkpoint(waiting_run).body)
    state["goal"] = 'Ünïcode "quoted" \\ and a float 1.5e-7 ' + "\u2028"
    state["evidence"] = {"ratio": 0.1, "big": 10**16, "ключ": [True, None]}
    key_id, body = sign_state(state)

    envelope = json.loads(body)
    assert body.encode() == canonical_json(envelope)
    signed = canonical_json(
        {"schema_version": envelope["schema_version"], "key_id": key_id, "state": state}
    )
    signing.verify(signed, kid=key_id, mac=envelope["mac"])
