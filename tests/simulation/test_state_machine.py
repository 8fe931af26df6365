"""The seeded simulation: the protocol's invariants hold under every fault, in any order.

One test per fault the issue names: each of its examples starts by making that fault
happen (so the coverage count is certain, not lucky), then Hypothesis drives random rules.
CI runs COUNTERSIGN_SIM_EXAMPLES examples per fault (default 2, derandomized so a red CI
is reproducible); `python -m tests.simulation --examples 200` runs thousands with a random
or given seed (tests/simulation/__main__.py, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from runs.tools.registry import register_tool, unregister_tool
from tests.simulation.ledger import SIM_TOOLS
from tests.simulation.machine import COVERAGE, REQUIRED_COVERAGE, focused_machine

pytestmark = pytest.mark.django_db(transaction=True)
EXAMPLES = int(os.environ.get("COUNTERSIGN_SIM_EXAMPLES", "2"))
STEPS = int(os.environ.get("COUNTERSIGN_SIM_STEPS", "25"))
SEEDED = bool(os.environ.get("COUNTERSIGN_SIM_SEEDED"))


@pytest.fixture
def sim_tools():
    tools = [tool_class() for tool_class in SIM_TOOLS]
    for tool in tools:
        register_tool(tool)
    yield tools
    for tool in tools:
        unregister_tool(tool)


@pytest.mark.parametrize("focus", REQUIRED_COVERAGE)
def test_every_invariant_holds_after_every_step_starting_from_each_fault(sim_tools, focus):
    COVERAGE.clear()
    run_state_machine_as_test(
        focused_machine(focus),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=not SEEDED,
            database=None,
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        ),
    )

    assert COVERAGE[focus] >= EXAMPLES, f"{focus} fired {COVERAGE[focus]} times: {COVERAGE}"
