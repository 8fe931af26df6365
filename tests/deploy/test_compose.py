"""docker-compose.yml is production-shaped, and the checker `make test` runs on it can fail.

The real file goes through the Compose binary (`config --format json --no-env-resolution`, as
scripts/check-compose runs it); broken copies of its output must each be reported.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = Path(sys.executable).with_name("docker-compose")


def _load_checker():
    spec = importlib.util.spec_from_file_location(
        "check_compose_properties", ROOT / "scripts" / "check_compose_properties.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checker = _load_checker()
DOCUMENTED = checker.documented_variables((ROOT / ".env.example").read_text())


@pytest.fixture(scope="module")
def compose_config() -> dict:
    # .env.example ships its secrets empty; stand-ins fill them, as scripts/check-compose does.
    stand_ins = {
        "DJANGO_SECRET_KEY": "stand-in-for-the-test",
        "POSTGRES_PASSWORD": "stand-in-for-the-test",
        "REDIS_PASSWORD": "stand-in-for-the-test",
        "COUNTERSIGN_CHECKPOINT_KEYS": "test:stand-in-for-the-test",
        "COUNTERSIGN_EVIDENCE_KEYS": "test:stand-in-for-the-test",
    }
    result = subprocess.run(
        [COMPOSE, "--env-file", ".env.example", "config", "--format=json", "--no-env-resolution"],
        cwd=ROOT,
        env={**os.environ, **stand_ins},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_compose_file_has_every_production_property(compose_config):
    assert checker.compose_violations(compose_config, DOCUMENTED) == []


def test_env_example_documents_the_variables_production_and_gunicorn_read():
    assert {
        "DJANGO_ALLOWED_HOSTS",
        "COUNTERSIGN_BEHIND_TLS_PROXY",
        "COUNTERSIGN_TRUSTED_PROXY_COUNT",
        "GUNICORN_WORKERS",
        "REDIS_PASSWORD",
    } <= DOCUMENTED


def _runserver_in_web(config):
    config["services"]["web"]["command"] = ["python", "manage.py", "runserver", "0.0.0.0:8000"]


def _development_settings_in_worker(config):
    config["services"]["worker"]["environment"]["DJANGO_SETTINGS_MODULE"] = "control.settings"


def _no_env_file_in_sweeper(config):
    del config["services"]["sweeper"]["env_file"]


def _no_worker_healthcheck(config):
    del config["services"]["worker"]["healthcheck"]


def _disabled_redis_healthcheck(config):
    config["services"]["redis"]["healthcheck"] = {"disable": True}


def _redis_url_without_password(config):
    config["services"]["web"]["environment"]["REDIS_URL"] = "redis://redis:6379/0"


def _documented_variable_not_passed(config):
    del config["services"]["worker"]["environment"]["COUNTERSIGN_TRUSTED_PROXY_COUNT"]


def _sandbox_faults_passed(config):
    config["services"]["web"]["environment"]["SANDBOX_FAULTS"] = "0"


def _redis_port_published(config):
    config["services"]["redis"]["ports"] = [{"target": 6379, "published": "6379"}]


@pytest.mark.parametrize(
    ("breakage", "reported"),
    [
        (_runserver_in_web, "web runs Django's development server (runserver)"),
        (_development_settings_in_worker, "worker does not set DJANGO_SETTINGS_MODULE"),
        (_no_env_file_in_sweeper, "sweeper does not read env_file .env"),
        (_no_worker_healthcheck, "worker has no healthcheck"),
        (_disabled_redis_healthcheck, "redis has no healthcheck"),
        (_redis_url_without_password, "web's REDIS_URL has no password"),
        (_documented_variable_not_passed, "worker is not passed COUNTERSIGN_TRUSTED_PROXY_COUNT"),
        (_sandbox_faults_passed, "web is passed SANDBOX_FAULTS"),
        (_redis_port_published, "redis publishes a port"),
    ],
    ids=lambda value: getattr(value, "__name__", "")[1:],
)
def test_the_checker_reports_a_broken_compose_file(compose_config, breakage, reported):
    broken = copy.deepcopy(compose_config)
    breakage(broken)

    violations = checker.compose_violations(broken, DOCUMENTED)

    assert any(violation.startswith(reported) for violation in violations), violations


def test_check_compose_property_script_exits_nonzero_on_a_broken_document(compose_config):
    broken = copy.deepcopy(compose_config)
    _runserver_in_web(broken)

    result = subprocess.run(
        [sys.executable, "scripts/check_compose_properties.py", ".env.example"],
        cwd=ROOT,
        input=json.dumps(broken),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "web runs Django's development server (runserver)" in result.stderr
