"""Runs the simulation at length, or replays one seed:

    python -m tests.simulation --examples 200            # 200 per fault, 19 faults: 3,800
    python -m tests.simulation --examples 200 --seed 42  # the same examples again
    python -m tests.simulation --focus provider:mismatch --seed 42 --steps 60

Without --seed a random seed is drawn and printed first, so any failure can be replayed
with the same command plus --seed. Hypothesis also prints the failing steps and a
@reproduce_failure blob. Exits with pytest's status.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import pytest

TEST = "test_every_invariant_holds_after_every_step_starting_from_each_fault"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    parser.add_argument("--examples", type=int, default=200, help="examples per fault")
    parser.add_argument("--steps", type=int, default=40, help="rules per example")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--focus", default="", help="one fault only, e.g. lease_expiry")
    options = parser.parse_args(argv)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"simulation seed {seed}: replay with --seed {seed}", flush=True)
    os.environ["COUNTERSIGN_SIM_EXAMPLES"] = str(options.examples)
    os.environ["COUNTERSIGN_SIM_STEPS"] = str(options.steps)
    os.environ["COUNTERSIGN_SIM_SEEDED"] = "1"
    selection = "tests/simulation/test_state_machine.py"
    if options.focus:
        selection += f"::{TEST}[{options.focus}]"
    return pytest.main([selection, "-q", "-x", f"--hypothesis-seed={seed}"])


if __name__ == "__main__":
    sys.exit(main())
