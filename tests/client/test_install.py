"""The client installs with pip into a fresh venv without Django (nor LangChain), and imports
there."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.client.conftest import CLIENT_DIR

CHECK = """
import importlib.util, sys
import countersign_client
from countersign_client import Countersign, Intent, Observation, requires_approval
from countersign_client import Rejected, Expired, Uncertain
assert importlib.util.find_spec("django") is None, "django must not be installed"
assert "django" not in sys.modules
# Without the [langchain] extra the integration says what to install.
assert importlib.util.find_spec("langchain") is None, "langchain must not be installed"
try:
    import countersign_client.langchain
except ImportError as error:
    assert "countersign-client[langchain]" in str(error), error
else:
    raise AssertionError("countersign_client.langchain imported without langchain")
client = Countersign("http://127.0.0.1:9", "cs_token")
assert client.api_url == "http://127.0.0.1:9/api/v1"
# The OpenAI Agents integration is an extra: without it, its module names what to install.
from countersign_client.paused import FileStateStore, MemoryStateStore
assert importlib.util.find_spec("agents") is None
try:
    import countersign_client.openai_agents
except ImportError as missing:
    assert "countersign-client[openai-agents]" in str(missing), missing
else:
    raise AssertionError("countersign_client.openai_agents imported without the SDK")
print(countersign_client.__version__)
"""


def test_pip_installs_the_client_into_a_fresh_venv_without_django(tmp_path):
    # A copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = shutil.copytree(
        CLIENT_DIR, tmp_path / "client", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.lower()
    assert "countersign-client==0.1.0" in installed
    assert "django" not in installed
    # Run from tmp_path so the repository's own client/ directory is not on the path.
    imported = subprocess.run(
        [str(python), "-c", CHECK], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "0.1.0"
