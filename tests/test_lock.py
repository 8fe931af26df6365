"""The lock files (requirements/*.txt, written by `make lock`) pin every dependency the two
pyproject.toml files declare, at a version they allow, with hashes: a dependency added or
bumped without `make lock` fails here, not at someone's install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OURS = {"countersign", "countersign-client"}


def _project(path: str) -> dict:
    return tomllib.loads((ROOT / path).read_text())["project"]


def _declared(path: str, *extras: str, all_extras: bool = False) -> list[Requirement]:
    project = _project(path)
    optional = project.get("optional-dependencies", {})
    names = list(optional) if all_extras else extras
    texts = project["dependencies"] + [text for extra in names for text in optional[extra]]
    return [Requirement(text) for text in texts]


def _entries(lock: str) -> list[tuple[str, str, int, Marker | None]]:
    """(name, version, how many hashes, marker) for each `name==version` of the lock file (a
    name pinned per Python version has one entry each)."""
    entries = []
    for entry in re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements" / lock).read_text()):
        pin = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)(?: ; ([^\\\n]+))?", entry)
        if pin:
            marker = Marker(pin[3].strip()) if pin[3] else None
            hashes = entry.count("--hash=sha256:")
            entries.append((canonicalize_name(pin[1]), pin[2], hashes, marker))
    return entries


def _pinned(lock: str) -> dict[str, tuple[str, int]]:
    """name -> (version, how many hashes), the last entry of each name."""
    return {name: (version, hashes) for name, version, hashes, _ in _entries(lock)}


def _installed(lock: str, python: str) -> dict[str, str]:
    """name -> version, what the lock installs on CPython `python` on Linux."""
    environment = {"python_version": python, "python_full_version": python + ".0"}
    environment |= {"sys_platform": "linux", "platform_python_implementation": "CPython"}
    environment |= {"implementation_name": "cpython", "platform_system": "Linux"}
    return {
        name: version
        for name, version, _, marker in _entries(lock)
        if marker is None or marker.evaluate(environment)
    }


LOCKS = {
    "dev.txt": _declared("pyproject.toml", "test", "demo")
    + _declared("client/pyproject.toml", all_extras=True),
    "app.txt": _declared("pyproject.toml") + _declared("client/pyproject.toml"),
    "bench.txt": _declared("pyproject.toml", "bench") + _declared("client/pyproject.toml"),
}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_pins_each_declared_dependency_at_an_allowed_version_with_hashes(lock):
    pins = _pinned(lock)
    wrong = []
    for requirement in LOCKS[lock]:
        name = canonicalize_name(requirement.name)
        if name in OURS:
            continue  # installed from this checkout after the lock (make install)
        version, hashes = pins.get(name, (None, 0))
        if version is None or version not in requirement.specifier or hashes == 0:
            wrong.append(f"{requirement} (locked: {version}, {hashes} hashes)")
    assert wrong == [], f"run make lock: requirements/{lock} does not satisfy {wrong}"


@pytest.mark.parametrize("python", ["3.12", "3.13"])
@pytest.mark.parametrize("lock", ["app.txt", "bench.txt"])
def test_the_image_and_the_bench_install_the_versions_the_suite_ran_with(lock, python):
    """app and bench start from dev's pins (scripts/lock): on the Pythons the suite runs on,
    a package both install is at dev's version, so what was tested is what the image runs."""
    dev = _installed("dev.txt", python)
    apart = {
        name: f"{version} (dev: {dev[name]})"
        for name, version in _installed(lock, python).items()
        if name in dev and dev[name] != version
    }
    assert apart == {}, f"run make lock: requirements/{lock} differs from dev.txt: {apart}"


def test_every_lock_pins_our_own_packages_nowhere():
    for lock in LOCKS:
        assert OURS.isdisjoint(_pinned(lock)), lock
