"""Settings for the benchmark's and the soak's own processes: the settings they were started
from (COUNTERSIGN_BENCH_BASE_SETTINGS, default control.settings) plus the `bench.noop` tool,
with the sandbox on (SANDBOX_ENABLED).

COUNTERSIGN_BENCH_CONN_MAX_AGE, when set, overrides every database's CONN_MAX_AGE: the
soak's threaded `runserver` needs 0, or each request thread keeps its connection open
(as tests/settings.py does for live_server).
"""

from __future__ import annotations

import os
from importlib import import_module

# The soak's ground truth is the sandbox: its web process serves it, its workers call it. Set
# as the environment variable, not the setting, so a base that refuses it (production) still does.
os.environ["SANDBOX_ENABLED"] = "1"
_base = import_module(os.environ.get("COUNTERSIGN_BENCH_BASE_SETTINGS", "control.settings"))
globals().update({name: value for name, value in vars(_base).items() if name.isupper()})

COUNTERSIGN_CONNECTORS = [
    *_base.COUNTERSIGN_CONNECTORS,
    str(_base.BASE_DIR / "bench" / "connectors.toml"),
]

if "COUNTERSIGN_BENCH_CONN_MAX_AGE" in os.environ:
    for _database in DATABASES.values():  # noqa: F821 (copied from the base settings)
        _database["CONN_MAX_AGE"] = int(os.environ["COUNTERSIGN_BENCH_CONN_MAX_AGE"])
