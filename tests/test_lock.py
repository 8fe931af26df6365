"""The lock files (requirements/*.txt, written by `make lock`) pin every dependency the two
pyproject.toml files declare, at a version they allow, with hashes: a dependency added or
bumped without `make lock` fails here, not at someone's install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
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


def _pinned(lock: str) -> dict[str, tuple[str, int]]:
    """name -> (version, how many hashes) for each `name==version` of the lock file."""
    pins: dict[str, tuple[str, int]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements" / lock).read_text()):
        pin = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", entry)
        if pin:
            pins[canonicalize_name(pin[1])] = (pin[2], entry.count("--hash=sha256:"))
    return pins


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


def test_every_lock_pins_our_own_packages_nowhere():
    for lock in LOCKS:
        assert OURS.isdisjoint(_pinned(lock)), lock
