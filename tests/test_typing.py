"""The modules mypy does not check yet (pyproject.toml, [[tool.mypy.overrides]] with
ignore_errors) only shrink: `make lint` runs mypy over the rest, and this holds the list to
at most KNOWN_UNTYPED real modules, in order. Fixing a module's types means taking it off the
list and lowering KNOWN_UNTYPED; a new module is typed from its first commit."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KNOWN_UNTYPED = 54


def untyped_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    overrides = config["tool"]["mypy"]["overrides"]
    ignored = [entry for entry in overrides if entry.get("ignore_errors")]
    assert len(ignored) == 1, "one list of modules mypy does not check, not several"
    return ignored[0]["module"]


def module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_the_list_of_modules_mypy_skips_does_not_grow():
    modules = untyped_modules()
    assert len(modules) <= KNOWN_UNTYPED, (
        f"{len(modules)} modules skip type checking, more than the {KNOWN_UNTYPED} known: "
        "type the new module instead of listing it"
    )


def test_the_list_names_real_modules_once_in_order():
    modules = untyped_modules()
    assert modules == sorted(set(modules))
    assert [name for name in modules if module_file(name) is None] == []
    assert not any("*" in name for name in modules), "name modules one by one, no wildcards"
