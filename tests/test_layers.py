"""The packages stay layered: each may import only from the layers beneath it, never in a cycle.

Read from the source with `ast` alone, so a broken or slow import cannot hide a violation and
nothing is executed. Every import counts, wherever it sits: inside a function, under
`if TYPE_CHECKING:`. A deferred import still couples the two modules, it only hides it from
the interpreter until call time.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# The composition root: the only control/ modules allowed to know every app, because their job
# is to wire the apps together (INSTALLED_APPS, the URL and API mounts, the server entry points,
# and the metrics page that assembles every app's counters). They sit at the top of control/;
# its folders (foundation/, api_kit/, auth/, web/) and its other modules are the foundation.
COMPOSITION_ROOT = frozenset(
    {
        "control/settings.py",
        "control/settings_production.py",
        "control/urls.py",
        "control/api.py",
        "control/wsgi.py",
        "control/asgi.py",
        "control/metrics.py",
    }
)

APPS = ("control", "runs", "reconciliation", "sandbox", "bench")
# Top-level module -> its folder; the client is packaged on its own, under another name.
PACKAGE_DIRS = {app: app for app in APPS} | {"countersign_client": "client/countersign_client"}
OURS = (*APPS, "countersign_client")

FOUNDATION = "the foundation (control/ outside the composition root) imports no app"
RUNS = "runs imports nothing from reconciliation, sandbox or bench"
RECONCILIATION = "reconciliation imports nothing from sandbox or bench"
SANDBOX = "sandbox imports none of our packages, only itself, Django and third parties"
CLIENT = "the client (countersign_client) imports neither Django nor any of our apps"
BENCH = "nothing outside bench imports bench"
RUNS_ROOMS = (
    ("runs.record", "runs.services", "runs.record (what a change writes) imports no service"),
    ("runs.services", "runs.execution", "runs.services imports nothing of the worker (execution)"),
    ("runs.pages", "runs.execution", "runs.pages imports nothing of the worker (execution)"),
)
MIGRATIONS = (
    "a migration imports no live code, only Django, third parties and the frozen modules of"
    " migrations packages (what it installs must not change when the code does)"
)
NO_CYCLES = "no import cycles between our modules"


@dataclass(frozen=True)
class Import:
    file: str  # relative to the scanned root, with forward slashes
    line: int
    text: str  # the statement as written: `from runs.models import Action`
    importer: str
    imported: str  # the module named: `runs.protocol` for `from runs import protocol`

    def breaks(self, rule: str) -> str:
        return f"{self.file}:{self.line}: `{self.text}` breaks: {rule}"


def _top(module: str) -> str:
    return module.partition(".")[0]


def _module_name(package: str, package_dir: Path, path: Path) -> str:
    parts = (package, *path.relative_to(package_dir).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_files(root: Path, migrations: bool) -> Iterable[tuple[Path, str]]:
    """The modules of our packages, or (migrations=True) only those of migrations packages,
    which have a rule of their own."""
    for package, folder in PACKAGE_DIRS.items():
        package_dir = root / folder
        for path in sorted(package_dir.rglob("*.py")):
            if ("migrations" in path.relative_to(package_dir).parts) == migrations:
                yield path, _module_name(package, package_dir, path)


def _from_base(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = (importer if is_package else importer.rpartition(".")[0]).split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def scan(root: Path, migrations: bool = False) -> list[Import]:
    """Every import in our packages under `root`: one entry per module a statement names."""
    files = list(_source_files(root, migrations))
    modules = {module for _, module in files}
    found = []
    for path, importer in files:
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, importer, path.name == "__init__.py")
                # `from runs import protocol` imports the module runs.protocol if there is one.
                named = [f"{base}.{a.name}" for a in node.names]
                named = [module if module in modules else base for module in named]
            else:
                continue
            for module in dict.fromkeys(named):
                found.append(Import(relative, node.lineno, ast.unparse(node), importer, module))
    return sorted(found, key=lambda imp: (imp.file, imp.line, imp.imported))


def _breaking(
    imports: Iterable[Import],
    rule: str,
    importers: Collection[str],
    forbidden: Callable[[str], bool],
    exempt: frozenset[str] = frozenset(),
) -> list[str]:
    return [
        imp.breaks(rule)
        for imp in imports
        if _top(imp.importer) in importers
        and imp.file not in exempt
        and forbidden(_top(imp.imported))
    ]


def foundation_violations(imports: Iterable[Import]) -> list[str]:
    apps = set(APPS) - {"control"}
    return _breaking(imports, FOUNDATION, {"control"}, apps.__contains__, COMPOSITION_ROOT)


def runs_violations(imports: Iterable[Import]) -> list[str]:
    return _breaking(imports, RUNS, {"runs"}, {"reconciliation", "sandbox", "bench"}.__contains__)


def reconciliation_violations(imports: Iterable[Import]) -> list[str]:
    return _breaking(imports, RECONCILIATION, {"reconciliation"}, {"sandbox", "bench"}.__contains__)


def sandbox_violations(imports: Iterable[Import]) -> list[str]:
    return _breaking(imports, SANDBOX, {"sandbox"}, (set(OURS) - {"sandbox"}).__contains__)


def client_violations(imports: Iterable[Import]) -> list[str]:
    def forbidden(top: str) -> bool:
        # django_rq, django_htmx, ninja...: the client must install without any of them.
        return top in APPS or top.startswith(("django", "ninja"))

    return _breaking(imports, CLIENT, {"countersign_client"}, forbidden)


def bench_violations(imports: Iterable[Import]) -> list[str]:
    return _breaking(imports, BENCH, set(OURS) - {"bench"}, "bench".__eq__)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def runs_room_violations(imports: Iterable[Import]) -> list[str]:
    return [
        imp.breaks(rule)
        for importer, imported, rule in RUNS_ROOMS
        for imp in imports
        if _within(imp.importer, importer) and _within(imp.imported, imported)
    ]


def migration_violations(imports: Iterable[Import]) -> list[str]:
    return [
        imp.breaks(MIGRATIONS)
        for imp in imports
        if _top(imp.imported) in OURS and "migrations" not in imp.imported.split(".")
    ]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def cycle_violations(imports: Iterable[Import]) -> list[str]:
    # Only the module actually named is an edge: adding implied parent `__init__` edges would
    # invent cycles through re-exports that Python resolves fine.
    ours = [i for i in imports if _top(i.imported) in OURS and i.imported != i.importer]
    graph: dict[str, set[str]] = {}
    for imp in ours:
        graph.setdefault(imp.importer, set()).add(imp.imported)
    # A few hundred modules: reachability from each is cheap and plainer than Tarjan.
    reach = {module: _reachable(graph, module) for module in graph}
    placed: set[str] = set()
    violations = []
    for module in sorted(graph):
        if module in placed or module not in reach[module]:
            continue
        component = {other for other in reach[module] if module in reach.get(other, ())}
        placed |= component
        edges = [i for i in ours if i.importer in component and i.imported in component]
        header = f"cycle among {', '.join(sorted(component))}:"
        violations.append("\n  ".join([header, *(i.breaks(NO_CYCLES) for i in edges)]))
    return violations


@pytest.fixture(scope="module")
def project_imports() -> list[Import]:
    return scan(PROJECT_ROOT)


def _assert_none(violations: list[str]) -> None:
    assert not violations, "\n" + "\n".join(violations)


def test_the_foundation_imports_no_app(project_imports):
    _assert_none(foundation_violations(project_imports))


def test_the_composition_root_names_only_modules_that_exist():
    # A module moved away would leave its old path exempting nothing, and a new module at that
    # path would inherit the exemption unseen.
    assert sorted(path for path in COMPOSITION_ROOT if not (PROJECT_ROOT / path).is_file()) == []


def test_runs_imports_nothing_from_reconciliation_sandbox_or_bench(project_imports):
    _assert_none(runs_violations(project_imports))


def test_reconciliation_imports_nothing_from_sandbox_or_bench(project_imports):
    _assert_none(reconciliation_violations(project_imports))


def test_sandbox_imports_none_of_our_packages(project_imports):
    _assert_none(sandbox_violations(project_imports))


def test_the_client_imports_neither_django_nor_our_apps(project_imports):
    _assert_none(client_violations(project_imports))


def test_nothing_outside_bench_imports_bench(project_imports):
    _assert_none(bench_violations(project_imports))


def test_no_modules_import_each_other_in_a_cycle(project_imports):
    _assert_none(cycle_violations(project_imports))


def test_the_rooms_of_runs_import_only_downwards(project_imports):
    _assert_none(runs_room_violations(project_imports))


def test_migrations_import_no_live_code():
    _assert_none(migration_violations(scan(PROJECT_ROOT, migrations=True)))


# One planted violation per rule, next to what must stay silent: the composition root importing
# apps, bench importing runs, relative imports within a package, a migration importing bench.
PLANTED_TREE = {
    "control/foundation/audit.py": "from runs.models import Action\n",
    "control/settings.py": "import bench.report\nfrom runs import views\n",
    "runs/models.py": "",
    "runs/views.py": "from .models import Action\n",
    "runs/jobs.py": "from reconciliation.services import sweep\n",
    "runs/a.py": "import runs.b\n",
    "runs/record/events.py": "from runs.services import approvals\n",
    "runs/services/approvals.py": "from runs.execution import worker\n",
    "runs/pages/inbox.py": "from runs.execution.worker import execute\n",
    "runs/b.py": "def later():\n    from runs import a\n",
    "runs/migrations/0001_initial.py": "import bench.report\n",
    "runs/migrations/0002_more.py": (
        "from control.migrations._frozen import Counted\nfrom control.foundation import rollup\n"
    ),
    "reconciliation/services.py": "from runs.models import Action\n",
    "reconciliation/views.py": "import sandbox.digest\n",
    "sandbox/digest.py": "",
    "sandbox/views.py": "import control.foundation.canonical\nfrom . import digest\n",
    "bench/report.py": "from runs.models import Action\n",
    "client/countersign_client/__init__.py": "from .x import Client\n",
    "client/countersign_client/x.py": "from django.conf import settings\n",
}


@pytest.fixture
def planted_imports(tmp_path) -> list[Import]:
    for name, source in PLANTED_TREE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return scan(tmp_path)


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        (foundation_violations, "control/foundation/audit.py:1: `from runs.models import Action`"),
        (runs_violations, "runs/jobs.py:1: `from reconciliation.services import sweep`"),
        (reconciliation_violations, "reconciliation/views.py:1: `import sandbox.digest`"),
        (sandbox_violations, "sandbox/views.py:1: `import control.foundation.canonical`"),
        (client_violations, "client/countersign_client/x.py:1: `from django.conf import settings`"),
        (bench_violations, "control/settings.py:1: `import bench.report`"),
        (cycle_violations, "runs/a.py:1: `import runs.b`"),
    ],
    ids=lambda value: value.__name__ if callable(value) else value.partition(":")[0],
)
def test_the_checker_reports_exactly_the_planted_violation(planted_imports, check, expected):
    (violation,) = check(planted_imports)
    assert f"{expected} breaks: " in violation


def test_the_planted_imports_against_the_rooms_of_runs_are_reported(planted_imports):
    assert [v.partition(" breaks")[0] for v in runs_room_violations(planted_imports)] == [
        "runs/record/events.py:1: `from runs.services import approvals`",
        "runs/services/approvals.py:1: `from runs.execution import worker`",
        "runs/pages/inbox.py:1: `from runs.execution.worker import execute`",
    ]


def test_a_planted_migration_that_imports_live_code_is_reported(tmp_path, planted_imports):
    violations = migration_violations(scan(tmp_path, migrations=True))
    assert [violation.partition(" breaks")[0] for violation in violations] == [
        "runs/migrations/0001_initial.py:1: `import bench.report`",
        "runs/migrations/0002_more.py:2: `from control.foundation import rollup`",
    ]


def test_the_planted_cycle_names_both_modules_and_the_deferred_import(planted_imports):
    (cycle,) = cycle_violations(planted_imports)
    assert cycle.startswith("cycle among runs.a, runs.b:")
    assert f"runs/b.py:2: `from runs import a` breaks: {NO_CYCLES}" in cycle


def test_relative_and_from_imports_resolve_to_the_module_they_name(planted_imports):
    resolved = {(imp.file, imp.text): imp.imported for imp in planted_imports}
    assert resolved["sandbox/views.py", "from . import digest"] == "sandbox.digest"
    assert resolved["runs/views.py", "from .models import Action"] == "runs.models"
    assert resolved["runs/b.py", "from runs import a"] == "runs.a"
    assert resolved["client/countersign_client/__init__.py", "from .x import Client"] == (
        "countersign_client.x"
    )
