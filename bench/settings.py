"""Settings for the benchmark's own worker processes: the settings they were started from
(COUNTERSIGN_BENCH_BASE_SETTINGS, default control.settings) plus the `bench.noop` tool."""

from __future__ import annotations

import os
from importlib import import_module

_base = import_module(os.environ.get("COUNTERSIGN_BENCH_BASE_SETTINGS", "control.settings"))
globals().update({name: value for name, value in vars(_base).items() if name.isupper()})

COUNTERSIGN_EXTRA_TOOLS = ("runs.tools.bench.BenchNoop",)
