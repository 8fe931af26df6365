"""Test settings for the SQLite leg (`make test-sqlite`): the demo's database, the same tests.

Both databases are SQLite files with the demo's options (control.foundation.env), never in
memory: the worker processes the tests start open the same files. One pair per pytest
process, like the PostgreSQL leg's databases.
"""

from __future__ import annotations

import os
import tempfile

_dir = os.environ.get("COUNTERSIGN_TEST_SQLITE_DIR", tempfile.gettempdir())
_suffix = os.environ.get("COUNTERSIGN_TEST_DB_SUFFIX", str(os.getpid()))
_files = {
    alias: os.path.join(_dir, f"test_{name}_{_suffix}.sqlite3")
    for alias, name in (("default", "countersign"), ("sandbox", "countersign_sandbox"))
}
os.environ.setdefault("DATABASE_URL", f"sqlite:///{_files['default']}")
os.environ.setdefault("SANDBOX_DATABASE_URL", f"sqlite:///{_files['sandbox']}")

from tests.settings import *  # noqa: E402, F403

for _alias, _file in _files.items():
    DATABASES[_alias]["TEST"]["NAME"] = _file  # noqa: F405
    DATABASES[_alias]["ENGINE"] = "tests.sqlite_backend"  # noqa: F405
