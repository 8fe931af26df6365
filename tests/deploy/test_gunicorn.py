"""gunicorn really serves the app under the production settings, static files included.

The image's way, minus Docker: collectstatic under the production settings, then gunicorn with
control.gunicorn_config, reached over HTTP as a TLS proxy would reach it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

from control.foundation.evidence_keys import b64url

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")
# What the TLS proxy in front sets: https, and the host name the deployment answers to.
PROXIED = {"X-Forwarded-Proto": "https", "Host": "countersign.example.com"}
GUNICORN_LOG = "gunicorn.log"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server_directory(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gunicorn")


@pytest.fixture(scope="module")
def production_environment(server_directory) -> dict[str, str]:
    """The production settings with the variables they require, and a STATIC_ROOT of our own."""
    (server_directory / "gunicorn_test_settings.py").write_text(
        "from control.settings_production import *  # noqa: F403\n"
        f"STATIC_ROOT = {str(server_directory / 'static')!r}\n"
    )
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "COUNTERSIGN_", "GUNICORN_"))
    }
    database = settings.DATABASES["default"]
    environment.update(
        {
            "PYTHONPATH": f"{server_directory}{os.pathsep}{ROOT}",
            "DJANGO_SETTINGS_MODULE": "gunicorn_test_settings",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "COUNTERSIGN_CHECKPOINT_KEYS": "k1:" + secrets.token_urlsafe(32),
            "COUNTERSIGN_EVIDENCE_KEYS": "e1:" + b64url(secrets.token_bytes(32)),
            "DJANGO_ALLOWED_HOSTS": "countersign.example.com",
            "COUNTERSIGN_BEHIND_TLS_PROXY": "1",
            "COUNTERSIGN_BASE_URL": "https://countersign.example.com",
            "COUNTERSIGN_EMAIL_USE_TLS": "1",
            # /healthz only asks PostgreSQL for `SELECT 1`: its maintenance database will do.
            "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/postgres",
            "REDIS_URL": settings.REDIS_URL,
            "GUNICORN_WORKERS": "2",
            "GUNICORN_THREADS": "2",
        }
    )
    return environment


@pytest.fixture(scope="module")
def gunicorn_url(production_environment, server_directory):
    """One server for the module: started once, stopped with SIGTERM as compose stops it."""
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=production_environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stderr
    port = _free_port()
    log = (server_directory / GUNICORN_LOG).open("w+")
    server = subprocess.Popen(
        [
            GUNICORN,
            *("--config", "python:control.gunicorn_config"),
            *("--bind", f"127.0.0.1:{port}"),
            "control.wsgi",
        ],
        cwd=ROOT,
        env=production_environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(url, server, log)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=40)
        log.close()


@pytest.fixture(scope="module")
def hashed_stylesheet(gunicorn_url, server_directory) -> str:
    """Our stylesheet's name in the manifest collectstatic wrote: css/countersign.<hash>.css."""
    manifest = json.loads((server_directory / "static" / "staticfiles.json").read_text())
    return manifest["paths"]["css/countersign.css"]


def _wait_for_health(url: str, server: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if requests.get(f"{url}/healthz", headers=PROXIED, timeout=2).ok:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass  # still starting
        time.sleep(0.2)
    log.seek(0)
    raise AssertionError(f"gunicorn did not become healthy:\n{log.read()}")


def test_gunicorn_serves_healthz_under_the_production_settings(gunicorn_url):
    # Plain HTTP from inside the network, as an orchestrator probes: exempt from the redirect.
    response = requests.get(
        f"{gunicorn_url}/healthz", headers={"Host": "countersign.example.com"}, timeout=5
    )

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_gunicorn_serves_static_files_under_hashed_names_compressed_and_cached(
    gunicorn_url, hashed_stylesheet
):
    assert hashed_stylesheet != "css/countersign.css"

    response = requests.get(
        f"{gunicorn_url}/static/{hashed_stylesheet}",
        headers={**PROXIED, "Accept-Encoding": "gzip"},
        timeout=5,
    )

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/css")
    assert response.headers["Content-Encoding"] == "gzip"
    assert "immutable" in response.headers["Cache-Control"]
    assert response.text == (ROOT / "static" / "css" / "countersign.css").read_text()


def test_gunicorn_pages_link_the_hashed_static_files(gunicorn_url, hashed_stylesheet):
    page = requests.get(f"{gunicorn_url}/accounts/login/", headers=PROXIED, timeout=5)

    assert page.status_code == 200
    assert f'href="/static/{hashed_stylesheet}"' in page.text


def test_gunicorn_redirects_plain_http_to_https_outside_healthz(gunicorn_url):
    response = requests.get(
        f"{gunicorn_url}/accounts/login/",
        headers={"Host": "countersign.example.com"},
        allow_redirects=False,
        timeout=5,
    )

    assert response.status_code == 301
    assert response.headers["Location"] == "https://countersign.example.com/accounts/login/"


def test_gunicorn_redirects_plain_http_for_static_files_too(gunicorn_url, hashed_stylesheet):
    response = requests.get(
        f"{gunicorn_url}/static/{hashed_stylesheet}",
        headers={"Host": "countersign.example.com"},
        allow_redirects=False,
        timeout=5,
    )

    assert response.status_code == 301
    assert (
        response.headers["Location"]
        == f"https://countersign.example.com/static/{hashed_stylesheet}"
    )


def test_decision_tokens_never_reach_the_access_log_nor_the_request_log(
    gunicorn_url, server_directory
):
    token = "eyJhIjoiYWN0aW9uIn0:1w3XyZ:SECRET-TOKEN-PART"
    decide = f"/decide/{token}/"
    # The page itself, and an asset it loads: the browser names the page in the Referer.
    page = requests.get(f"{gunicorn_url}{decide}?from=mail", headers=PROXIED, timeout=5)
    asset = requests.get(
        f"{gunicorn_url}/static/missing.css",
        headers={**PROXIED, "Referer": f"https://countersign.example.com{decide}"},
        timeout=5,
    )
    # Signing in from the link: the login page's `?next=` names it, percent-encoded or not.
    for quoted_next in (decide, decide.replace("/", "%2F").replace(":", "%3A")):
        login = requests.get(
            f"{gunicorn_url}/accounts/login/?next={quoted_next}", headers=PROXIED, timeout=5
        )
        assert login.status_code == 200
    assert page.status_code >= 400  # a forged token: refused, and Django logs the path
    assert asset.status_code == 404

    time.sleep(0.5)  # the access log is written after the response
    log = (server_directory / GUNICORN_LOG).read_text()
    assert f"{page.reason}: /decide/[redacted]/" in log  # Django's request log
    assert f'GET /decide/[redacted]/?from=mail HTTP/1.1" {page.status_code}' in log
    assert '"https://countersign.example.com/decide/[redacted]/"' in log  # the Referer
    assert "SECRET-TOKEN-PART" not in log  # ...without the token
    assert "eyJhIjoiYWN0aW9uIn0" not in log
    assert "next=%2Fdecide%2F[redacted]%2F" in log
