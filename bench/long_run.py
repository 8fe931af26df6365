"""One long run through the real services and worker step: thousands of completed reads and
writes, to show that a checkpoint's size and a transition's cost do not grow with the work
a run has done (checkpoint schema v2 keeps a count and a digest, not the list).

Each step is one intent: proposed (a write on an observation, then approved), then claimed
and processed by `runs.execution.worker.process_action` in this process, which verifies the
signed checkpoint, checks the intent against it, calls the in-process tool and records the
receipt. The writes are spread evenly among the reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db.models.functions import Length

from bench.measure import make_bench_tenant
from bench.tools import BenchNoop, BenchRead
from control.foundation.canonical import content_hash
from runs.execution.worker import process_action
from runs.models import Checkpoint, Run
from runs.record.verification import run_verify
from runs.services import (
    action_propose,
    approval_decide,
    lease_claim,
    observation_record,
    run_start,
)
from runs.tools.errors import UnsupportedTool
from runs.tools.registry import get_tool, register_tool

WORKER = "long-run"


@dataclass
class LongRunFigures:
    reads: int
    writes: int
    checkpoint_bytes: list[int] = field(default_factory=list)
    window_ms: list[float] = field(default_factory=list)  # mean ms per step, by window
    problems: list[str] = field(default_factory=list)
    run: Run | None = None

    @property
    def growth(self) -> float:
        """Mean step cost of the last window over the first's (1.0 is flat)."""
        return self.window_ms[-1] / self.window_ms[0]


def ensure_tools() -> None:
    for tool in (BenchNoop(), BenchRead()):
        try:
            get_tool(tool.name)
        except UnsupportedTool:
            register_tool(tool)


def writes_at(reads: int, writes: int) -> set[int]:
    """The step numbers that are writes, spread evenly over the run."""
    steps = reads + writes
    return {round((n + 0.5) * steps / writes) for n in range(writes)} if writes else set()


def measure_long_run(*, reads: int, writes: int, windows: int = 10) -> LongRunFigures:
    ensure_tools()
    bench = make_bench_tenant("long-run")
    run = run_start(tenant=bench.tenant, goal="long run", created_by=WORKER)
    figures = LongRunFigures(reads=reads, writes=writes, run=run)
    steps = reads + writes
    write_steps = writes_at(reads, writes)
    window = max(1, steps // windows)
    spent = 0.0
    for step in range(steps):
        started = time.perf_counter()
        _step(run, bench.operator, step, write=step in write_steps)
        spent += time.perf_counter() - started
        if (step + 1) % window == 0:
            figures.window_ms.append(spent * 1000 / window)
            spent = 0.0
    run.refresh_from_db()
    figures.checkpoint_bytes = list(
        Checkpoint.objects.filter(run=run)
        .annotate(size=Length("body"))
        .order_by("state_version")
        .values_list("size", flat=True)
    )
    figures.problems = run_verify(run)
    return figures


def _step(run: Run, operator, step: int, *, write: bool) -> None:
    run.refresh_from_db()
    observation = None
    if write:
        observation = observation_record(
            run=run,
            source="bench.read",
            ref=f"item-{step}",
            content_hash=content_hash(f"item-{step}".encode()),
            summary=f"item {step} needs the write",
            actor=WORKER,
        )
    action, _ = action_propose(
        run=run,
        action_id=f"{'write' if write else 'read'}-{step}",
        tool="bench.noop" if write else "bench.read",
        target=f"item-{step}",
        args={"n": step},
        contract_version="v1",
        proposed_by=WORKER,
        observation=observation,
    )
    if write:
        approval_decide(
            action=action,
            approver=operator,
            decision="approve",
            seen_digest=action.intent_digest,
            seen_state_version=action.base_version,
        )
    lease = lease_claim(run_id=run.pk, owner=WORKER)
    process_action(action_pk=action.pk, lease=lease, worker=WORKER)
