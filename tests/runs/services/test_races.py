"""Two connections change the same run at once: exactly one wins."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from runs.exceptions import StaleState
from runs.execution.worker import _verified_state
from runs.models import Action, Run
from runs.record.carry import checkpoint_write
from runs.record.events import append_event
from runs.services import approval_decide, lease_claim, observation_record
from tests.factories import (
    approve,
    make_action,
    make_run,
    make_tenant,
    make_user,
    set_policy,
)


@pytest.mark.django_db(transaction=True)
def test_two_writers_from_the_same_version_one_wins_one_is_refused():
    run = make_run(make_tenant())
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def write(label: str) -> None:
        stale_copy = Run.objects.get(pk=run.pk)
        barrier.wait()
        try:
            observation_record(
                run=stale_copy,
                source=label,
                ref="r",
                summary=label,
                content_hash="sha256:" + "a" * 64,
                actor=label,
            )
            outcomes.append("won")
        except StaleState:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.refresh_from_db()
    assert sorted(outcomes) == ["refused", "won"]
    assert (run.state_version, run.observations.count()) == (2, 1)


@pytest.mark.django_db
def test_a_run_advanced_after_the_worker_read_it_is_verified_again_not_stopped():
    """The scale-out simulation found it: the worker loaded the action with its run, another
    writer advanced the run, and the newer checkpoint looked like a stale one to the worker,
    which tried to stop a healthy run for human recovery."""
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    lease = lease_claim(run_id=action.run_id, owner="race-worker")
    in_hand = Run.objects.get(pk=action.run_id)
    with transaction.atomic():
        advanced = Run.objects.get(pk=action.run_id)
        append_event(advanced, type="run.noted", actor="another-writer")
        checkpoint_write(advanced)

    state = _verified_state(in_hand, lease, "race-worker")

    assert state is not None
    assert state["state_version"] == advanced.state_version == in_hand.state_version
    in_hand.refresh_from_db()
    assert in_hand.phase == "executing"


@pytest.mark.django_db
def test_a_checkpoint_older_than_the_run_is_still_refused_after_reading_the_run_again():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    lease = lease_claim(run_id=action.run_id, owner="race-worker")
    run = Run.objects.get(pk=action.run_id)
    with transaction.atomic():
        append_event(run, type="run.noted", actor="a-writer-that-wrote-no-checkpoint")

    assert _verified_state(Run.objects.get(pk=run.pk), lease, "race-worker") is None
    run.refresh_from_db()
    assert (run.phase, run.stop_reason.startswith("checkpoint refused at freshness")) == (
        "failed",
        True,
    )


def _someone_waits_on_a_lock(deadline: float) -> bool:
    """True once another session of this database waits for a row lock."""
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return True
        time.sleep(0.01)
    return False


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_two_approvers_deciding_at_once_both_count_and_the_write_goes_ahead():
    """Two of two required: the second decision, taken while the first is uncommitted, waits
    for it on the action's row and then counts both. Read before the first committed, it
    would see no grant, and its own event would meet a run that moved on: refused as stale,
    though nothing the approver saw had changed."""
    tenant = make_tenant()
    set_policy(tenant, "ticket.close", required_approvals=2)
    action = make_action(make_run(tenant))
    first, second = make_user(tenant, "operator"), make_user(tenant, "operator")
    first_decided, first_may_commit = threading.Event(), threading.Event()
    outcomes: dict[str, str] = {}

    def decide_as(approver, label: str, hold: bool) -> None:
        try:
            with transaction.atomic():
                approval_decide(
                    action=Action.objects.get(pk=action.pk),
                    approver=approver,
                    decision="approve",
                    seen_digest=action.intent_digest,
                    seen_state_version=action.base_version,
                )
                if hold:
                    first_decided.set()
                    first_may_commit.wait(30)
            outcomes[label] = "decided"
        except Exception as error:  # the outcome under test: what the second decision met
            outcomes[label] = f"{type(error).__name__}: {error}"
        finally:
            connection.close()

    one = threading.Thread(target=decide_as, args=(first, "first", True))
    one.start()
    assert first_decided.wait(30)
    two = threading.Thread(target=decide_as, args=(second, "second", False))
    two.start()
    waited = _someone_waits_on_a_lock(time.monotonic() + 30)
    first_may_commit.set()
    one.join()
    two.join()

    action.refresh_from_db()
    assert waited
    assert outcomes == {"first": "decided", "second": "decided"}
    assert (action.status, action.approvals.count()) == ("approved", 2)
