"""The seeded simulation: the protocol's invariants hold under every fault, in any order.

CI runs a bounded number of examples (COUNTERSIGN_SIM_EXAMPLES, default 25, derandomized so
a red CI is reproducible); `python -m tests.simulation --examples 5000` runs thousands with
a random or given seed (see tests/simulation/__main__.py and docs/PERFORMANCE.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from runs.tools.registry import register_tool, unregister_tool
from tests.simulation.ledger import SIM_TOOLS
from tests.simulation.machine import COVERAGE, REQUIRED_COVERAGE, CountersignMachine

pytestmark = pytest.mark.django_db
EXAMPLES = int(os.environ.get("COUNTERSIGN_SIM_EXAMPLES", "25"))
STEPS = int(os.environ.get("COUNTERSIGN_SIM_STEPS", "40"))
SEEDED = bool(os.environ.get("COUNTERSIGN_SIM_SEEDED"))


@pytest.fixture
def sim_tools():
    tools = [tool_class() for tool_class in SIM_TOOLS]
    for tool in tools:
        register_tool(tool)
    yield tools
    for tool in tools:
        unregister_tool(tool)


def test_every_invariant_holds_after_every_step_under_every_fault(sim_tools):
    COVERAGE.clear()
    run_state_machine_as_test(
        CountersignMachine,
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

    missing = [label for label in REQUIRED_COVERAGE if COVERAGE[label] == 0]
    assert not missing, f"never fired: {missing}; coverage: {dict(COVERAGE)}"
