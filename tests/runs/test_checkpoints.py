"""Signed checkpoints: verified in order, every mutation refused, old versions handled."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from control.canonical import canonical_json
from runs.exceptions import CheckpointError
from runs.record.checkpoints import (
    SCHEMA_VERSION,
    check_invariants,
    checkpoint_verify,
    latest_checkpoint,
    sign_state,
)
from runs.services import lease_claim
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"


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


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("v*.json")), ids=lambda p: p.name)
def test_historical_fixtures_still_verify(fixture):
    state = checkpoint_verify(fixture.read_bytes())
    assert state["phase"] == "waiting_approval"
    assert state["pending_action"]["tool"] == "ticket.close"


def test_a_fixture_signed_with_a_rotated_out_key_fails_once_that_key_is_removed(settings):
    fixture = FIXTURES / "v1_waiting_approval.json"
    assert checkpoint_verify(fixture.read_bytes())["state_version"] >= 1
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"test-2": b"second-test-checkpoint-key"}
    with pytest.raises(CheckpointError, match="unknown signing key") as error:
        checkpoint_verify(fixture.read_bytes())
    assert error.value.step == "mac"
