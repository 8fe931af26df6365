"""The front door: `make demo` runs from nothing configured, and stops everything it started."""

from __future__ import annotations

import contextlib
import http.cookiejar
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.management.commands.addmember import Command as AddMember

BASE_DIR = Path(__file__).resolve().parent.parent
DEMO_SCRIPT = BASE_DIR / "scripts" / "demo.py"
START_TIMEOUT_SECONDS = 180
STOP_TIMEOUT_SECONDS = 60
# Only what a fresh shell has: the suite's own DATABASE_URL, DJANGO_SETTINGS_MODULE and
# secrets must not leak into the demo, which has to manage with nothing configured.
KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def load_demo_script():
    # As `python scripts/demo.py` does: the script's folder is first on the path, for its
    # sibling demo_welcome.
    sys.path.insert(0, str(DEMO_SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("countersign_demo", DEMO_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


demo = load_demo_script()
welcome = importlib.import_module("demo_welcome")  # what the demo prints, beside it


def unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def something_listens_on(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def processes_in_session(session_id: int) -> list[int]:
    """Live processes of a session: the demo's children keep its session whatever their group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _parent, _group, session = stat.rpartition(")")[2].split()[:4]
        if int(session) == session_id and state != "Z":
            found.append(int(entry.name))
    return found


def fresh_clone_environment() -> dict[str, str]:
    environment = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    # Nothing listens there, so the demo must start its embedded Redis.
    environment["REDIS_URL"] = f"redis://127.0.0.1:{unused_port()}/0"
    return environment


@contextlib.contextmanager
def running_demo(port: int, var_dir: Path, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run scripts/demo.py in a session of its own; whatever happens, leave nothing behind."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(DEMO_SCRIPT), "--port", str(port), "--var-dir", str(var_dir)],
            cwd=BASE_DIR,
            env=fresh_clone_environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=STOP_TIMEOUT_SECONDS)
            for leftover in processes_in_session(process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leftover, signal.SIGKILL)
            process.wait()


def output_of(log_path: Path) -> str:
    return log_path.read_text(errors="replace")


def local_opener(*handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers)


def status_of(url: str) -> int | None:
    try:
        with local_opener().open(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def wait_until_running(process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Wait for the demo to print its login URL, which it does once /healthz answers 200."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while "Countersign is running:" not in output_of(log_path):
        if process.poll() is not None:
            pytest.fail(f"demo exited with {process.returncode}:\n{output_of(log_path)}")
        if time.monotonic() > deadline:
            pytest.fail(f"demo not running after {START_TIMEOUT_SECONDS} s:\n{output_of(log_path)}")
        time.sleep(0.5)


class KeepRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def log_in_status(login_url: str, username: str, password: str) -> int:
    """The status of a login POST: Django redirects on success, shows the form again if not."""
    opener = local_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), KeepRedirects()
    )
    with opener.open(login_url, timeout=10) as response:
        page = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "the login page has no CSRF token field"
    form = {"csrfmiddlewaretoken": token.group(1), "username": username, "password": password}
    request = urllib.request.Request(
        login_url, data=urllib.parse.urlencode(form).encode(), headers={"Referer": login_url}
    )
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds leftovers through /proc")
def test_demo_from_nothing_configured_serves_login_and_stops_everything_on_sigint(tmp_path):
    port = unused_port()
    var_dir = tmp_path / "var"
    log_path = tmp_path / "demo.log"
    login_url = f"http://127.0.0.1:{port}/accounts/login/"

    with running_demo(port, var_dir, log_path) as process:
        wait_until_running(process, log_path)
        assert status_of(login_url) == 200, output_of(log_path)
        # The demo turns the sandbox on: its fake external systems answer.
        assert status_of(f"http://127.0.0.1:{port}/sandbox/effects") == 200, output_of(log_path)
        passwords = json.loads((var_dir / "demo-passwords.json").read_text())
        for username in ("operator", "reconciler", "auditor", "admin"):
            assert log_in_status(login_url, username, passwords[username]) == 302, username
        # The printed MCP token opens a session at the printed /mcp/ URL.
        token = (var_dir / "demo-mcp-token").read_text().strip()
        assert demo.mcp_accepts(port, token), output_of(log_path)
        assert not demo.mcp_accepts(port, token + "x")

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, output_of(log_path)
        assert processes_in_session(process.pid) == [], output_of(log_path)

    assert not something_listens_on(port)
    output = output_of(log_path)
    assert "embedded Valkey" in output
    assert login_url in output
    for username, password in passwords.items():
        assert re.search(rf"^\s+{username}\s+{re.escape(password)}$", output, re.MULTILINE)
    assert f"MCP: http://127.0.0.1:{port}/mcp/ with the header Authorization: Bearer {token}" in (
        output
    )
    assert '"COUNTERSIGN_TOKEN": "' + token in output
    # The follow-up commands it prints reach this demo, not the default port.
    assert f"manage.py demo_agent --url http://127.0.0.1:{port} --scenario saga" in output
    assert f"curl -s -X POST http://127.0.0.1:{port}/sandbox/faults" in output
    assert set(re.findall(r"http://127\.0\.0\.1:(\d+)", output)) == {str(port)}


def test_demo_refuses_a_port_that_is_taken(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        finished = subprocess.run(
            [sys.executable, str(DEMO_SCRIPT), "--port", str(port), "--var-dir", str(tmp_path)],
            env=fresh_clone_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert finished.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken" in finished.stderr


def sleeper(name: str):
    return demo.ProcessSpec(name=name, argv=(sys.executable, "-c", "import time; time.sleep(60)"))


def test_supervisor_reports_a_child_that_dies_and_stops_the_others():
    supervisor = demo.Supervisor()
    crasher = demo.ProcessSpec(name="crasher", argv=(sys.executable, "-c", "raise SystemExit(3)"))
    try:
        supervisor.start(sleeper("worker"))
        survivor = supervisor.running[0][1]
        supervisor.start(crasher)
        with pytest.raises(demo.DemoError, match="crasher exited unexpectedly with code 3"):
            supervisor.watch()
    finally:
        supervisor.stop_all()

    assert survivor.returncode == -signal.SIGTERM
    assert supervisor.running == []


def test_supervisor_lets_a_one_shot_child_finish_and_runs_on_until_asked_to_stop():
    supervisor = demo.Supervisor()
    agent = demo.ProcessSpec(name="agent", argv=(sys.executable, "-c", "pass"), one_shot=True)
    try:
        supervisor.start(sleeper("worker"))
        supervisor.start(agent)
        supervisor.running[1][1].wait(timeout=30)
        threading.Timer(1.0, supervisor.request_stop, args=(signal.SIGINT,)).start()
        with pytest.raises(demo.StopRequested, match="SIGINT"):
            supervisor.watch()
        assert [spec.name for spec, _ in supervisor.running] == ["worker"]
    finally:
        supervisor.stop_all()


def test_a_generated_password_that_begins_with_a_dash_still_reaches_addmember():
    passwords = {username: f"-{username}-x" for username in demo.DEMO_USERS}
    command = list(dict(demo.setup_steps(passwords))["user reconciler"])
    arguments = command[command.index("addmember") + 1 :]

    parser = AddMember().create_parser("manage.py", "addmember")
    options = parser.parse_args(arguments)  # exits (SystemExit) on "expected one argument"

    assert options.password == "-reconciler-x"
    assert options.username == "reconciler"
