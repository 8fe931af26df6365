"""Checks what docker-compose.yml must be for production, beyond parsing.

Reads `docker compose config --format json --no-env-resolution` on stdin (env files stay named,
not merged into `environment`) and .env.example's path as its argument; prints each violation
and exits 1 when there is one. scripts/check-compose runs it; tests/deploy/test_compose.py feeds
it broken documents. The app services are those built from this repository.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

PRODUCTION_SETTINGS = "control.settings_production"
APP_SERVICES = ("migrate", "web", "worker", "sweeper")
HEALTHCHECKED_SERVICES = ("postgres", "redis", "web", "worker")
UNPUBLISHED_SERVICES = ("postgres", "redis")
# Documented in .env.example, but for compose's own interpolation: the app never reads them.
COMPOSE_ONLY_VARIABLES = frozenset(
    {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "WEB_PORT", "COUNTERSIGN_CONNECTORS_DIR"}
)
# The demo's sandbox and the crash tests' fault points: production refuses them.
DEMO_ONLY_VARIABLES = frozenset(
    {
        "SANDBOX_ENABLED",
        "SANDBOX_FAULTS",
        "COUNTERSIGN_SANDBOX_URL",
        "COUNTERSIGN_ALLOW_FAULT_POINTS",
        "COUNTERSIGN_FAULT_POINT",
    }
)
DOCUMENTED_VARIABLE = re.compile(r"^([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def documented_variables(env_example: str) -> set[str]:
    return set(DOCUMENTED_VARIABLE.findall(env_example))


def _words(command: str | list[str] | None) -> str:
    return " ".join(command) if isinstance(command, list) else command or ""


def compose_violations(config: dict, documented: set[str]) -> list[str]:
    services = config.get("services", {})
    violations = [f"service {name} is missing" for name in APP_SERVICES if name not in services]
    for name, service in services.items():
        launched = f"{_words(service.get('entrypoint'))} {_words(service.get('command'))}"
        if "runserver" in launched:
            violations.append(f"{name} runs Django's development server (runserver)")
    for name in HEALTHCHECKED_SERVICES:
        healthcheck = services.get(name, {}).get("healthcheck") or {}
        if not healthcheck.get("test") or healthcheck.get("disable"):
            violations.append(f"{name} has no healthcheck")
    for name in UNPUBLISHED_SERVICES:
        if services.get(name, {}).get("ports"):
            violations.append(f"{name} publishes a port: only the stack's network may reach it")
    for name in APP_SERVICES:
        violations += _app_violations(name, services.get(name, {}), documented)
    return violations


def _app_violations(name: str, service: dict, documented: set[str]) -> list[str]:
    violations = []
    environment = service.get("environment") or {}
    if environment.get("DJANGO_SETTINGS_MODULE") != PRODUCTION_SETTINGS:
        violations.append(f"{name} does not set DJANGO_SETTINGS_MODULE={PRODUCTION_SETTINGS}")
    if not any(Path(entry["path"]).name == ".env" for entry in service.get("env_file") or []):
        violations.append(f"{name} does not read env_file .env")
    if not urlsplit(environment.get("REDIS_URL") or "").password:
        violations.append(f"{name}'s REDIS_URL has no password")
    required = documented - COMPOSE_ONLY_VARIABLES - DEMO_ONLY_VARIABLES
    for variable in sorted(required - environment.keys()):
        violations.append(f"{name} is not passed {variable}, which .env.example documents")
    for variable in sorted(DEMO_ONLY_VARIABLES & environment.keys()):
        violations.append(f"{name} is passed {variable}: the demo's, refused in production")
    return violations


def main() -> int:
    documented = documented_variables(Path(sys.argv[1]).read_text())
    violations = compose_violations(json.load(sys.stdin), documented)
    for violation in violations:
        print(f"check-compose: {violation}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
