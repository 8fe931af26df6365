"""A long run stays small: its checkpoints and the cost of writing them do not grow with
the work it has done (checkpoint schema v2: a count and a digest over the receipts)."""

from __future__ import annotations

import pytest

from bench.long_run import measure_long_run, writes_at
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from runs.record.completed import action_entry, completed_fold

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("noop_tool", "read_tool")]
LIMIT = 16 * 1024


def test_writes_are_spread_evenly_among_the_reads():
    steps = writes_at(500, 100)
    assert len(steps) == 100
    assert min(steps) < 6
    assert max(steps) > 594
    assert all(0 <= step < 600 for step in steps)


def test_a_long_run_keeps_every_checkpoint_small_and_the_same_size_and_verifies():
    # 250 reads and 50 writes: at v1 the last checkpoint embedded all 300 receipts (~100 KB).
    figures = measure_long_run(reads=250, writes=50, windows=5)
    run = figures.run

    assert figures.problems == []
    assert (run.completed_count, run.actions.filter(status="succeeded").count()) == (300, 300)
    assert max(figures.checkpoint_bytes) < LIMIT
    # The same kinds of checkpoint (idle, a read pending, a write approved) early and late:
    # only the digits of counters and ids may differ.
    early, late = figures.checkpoint_bytes[:100], figures.checkpoint_bytes[-100:]
    assert max(late) - max(early) < 32
    assert min(late) - min(early) < 32
    state = checkpoint_verify(latest_checkpoint(run).body, run=run)
    assert state["completed"] == {"count": 300, "digest": run.completed_digest}


def test_the_completed_digest_chains_the_receipts_in_the_order_they_were_recorded():
    figures = measure_long_run(reads=4, writes=2, windows=1)
    run = figures.run
    actions = list(run.actions.select_related("receipt").order_by("receipt__created_at"))
    in_order = completed_fold(action_entry(action) for action in actions)
    reversed_order = completed_fold(action_entry(action) for action in reversed(actions))
    assert in_order == (run.completed_count, run.completed_digest)
    assert reversed_order != in_order
