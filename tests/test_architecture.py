"""The project's dependency direction, enforced.

app → engine, cache; engine.jobs → engine.training, engine.privacy, cache; engine.training →
engine.privacy. Nothing in engine/ or cache/ imports streamlit, plotly or matplotlib; engine.privacy imports
no torch.

Inside engine.training the rooms are layered (`TRAINING_LAYERS`, bottom first; a module imports only from its own
layer or those below):
1. the data and the networks: datasets, the ScatterNet features, models and per-example clipping, which know
   nothing of a spec;
2. config: the spec, its keys and checks, the catalogue and the plan with its ledger;
3. a run's randomness and its public transforms: the noise streams, noise drawn ahead, DP-PCA, augmentation,
   the iterates' average and the canaries' placement;
4. what a run reports: its records and result (`run_results`), and the audit's canaries that add to a result;
5. the algorithms: their step chains and the step registry;
6. the run setup: from a spec and its data to the inputs, model, optimizer and step a run trains with;
7. the trainers (single run, stack), which never import each other;
8. the pace, which times the setup and the trainers; the `engine.training` façade, which no module inside imports.

And no import cycle among the project's modules (`test_no_import_cycle`).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from app.pages import PAGES
from tests.helpers import ROOT

UI_LIBRARIES = {"streamlit", "plotly", "matplotlib"}
# package → project packages it must not import
FORBIDDEN = {
    "cache": {"engine", "app"},
    "engine.privacy": {"engine.training", "engine.jobs", "cache", "app", "torch"},
    "engine.training": {"engine.jobs", "cache", "app"},
    "engine.jobs": {"app"},
}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_files(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("package", ["engine", "cache"])
def test_no_ui_library_below_the_app(package):
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in module_files(package)
        for name in imports_of(path)
        if name.split(".")[0] in UI_LIBRARIES
    ]
    assert not offenders, offenders


@pytest.mark.parametrize(("package", "forbidden"), sorted(FORBIDDEN.items()))
def test_dependency_direction(package, forbidden):
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in module_files(package)
        for name in imports_of(path)
        if any(under(name, f) for f in forbidden)
    ]
    assert not offenders, offenders


def test_importing_the_privacy_ledger_loads_no_torch():
    code = "import sys, engine.privacy; print('torch' in sys.modules, 'streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


SOURCE_PACKAGES = ("app", "engine", "cache")
MAX_MODULE_LINES = 400
# Modules still over the limit, each at most this long: the ratchet only goes down (split them, then drop them
# here). Every other module stays within MAX_MODULE_LINES.
OVERSIZE_MODULES: dict[str, int] = {}
SQL = ("SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", "CREATE TABLE", "CREATE INDEX", "PRAGMA ")


def source_files() -> list[Path]:
    return [
        path
        for package in SOURCE_PACKAGES
        for path in module_files(package)
        if path.relative_to(ROOT).parts[:2] != ("cache", "data")
    ]


def test_no_underscored_name_is_imported_across_modules():
    offenders = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in SOURCE_PACKAGES:
                offenders += [
                    f"{path.relative_to(ROOT)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert not offenders, offenders


def test_modules_stay_small_and_the_oversize_ones_only_shrink():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in source_files()}
    too_long = {name: n for name, n in sizes.items() if n > OVERSIZE_MODULES.get(name, MAX_MODULE_LINES)}
    assert not too_long, f"over {MAX_MODULE_LINES} lines (or over their ratchet): {too_long}"
    shrunk = {name: sizes.get(name) for name in OVERSIZE_MODULES if sizes.get(name, 0) <= MAX_MODULE_LINES}
    assert not shrunk, f"now within {MAX_MODULE_LINES} lines (or gone): drop them from OVERSIZE_MODULES: {shrunk}"


def test_every_sql_statement_lives_in_the_store():
    def holds_sql(path: Path) -> bool:
        strings = (
            node.value
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        )
        return any(text.lstrip().startswith(SQL) for text in strings)

    outside = [path for path in source_files() if not under(".".join(path.relative_to(ROOT).parts[:2]), "cache.store")]
    offenders = [str(path.relative_to(ROOT)) for path in outside if holds_sql(path)]
    assert not offenders, offenders


PAGE_SCRIPTS = sorted(p.stem for p in (ROOT / "app" / "views").glob("*.py") if p.stem != "__init__")
PAGE_PACKAGES = tuple(f"app.{name}" for name in PAGE_SCRIPTS)  # each page's parts: app/<name>/
MAX_VIEW_LINES = 60
CACHE_DECORATORS = ("st.cache_data", "st.cache_resource")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_every_page_has_its_script_its_package_and_its_entry():
    """A page is `app/views/<name>.py`, its package `app/<name>/` and its entry in `app/pages.py`: each of the three
    has the other two, so the navigation, the scripts and the page packages the import rules cover are one set."""
    entries = [page.name for page in PAGES]
    packages = {p.parent.name for p in (ROOT / "app").glob("*/__init__.py")} - {"common", "services", "views"}
    assert len(entries) == len(set(entries)), f"a page listed twice in app/pages.py: {entries}"
    assert set(entries) == set(PAGE_SCRIPTS), f"app/pages.py lists {entries}; app/views/ has {PAGE_SCRIPTS}"
    assert packages == set(PAGE_SCRIPTS), f"page packages {sorted(packages)}; page scripts {PAGE_SCRIPTS}"
    assert sum(page.default for page in PAGES) == 1, "exactly one page opens by default"
    assert all((ROOT / "app" / page.script).is_file() for page in PAGES)


def test_no_page_imports_another_pages_parts():
    offenders = []
    for page in PAGE_PACKAGES:
        for path in module_files(page):
            offenders += [
                f"{path.relative_to(ROOT)} imports {name}"
                for name in imports_of(path)
                if any(under(name, other) for other in PAGE_PACKAGES if other != page)
            ]
    below_pages = [path for package in ("app.common", "app.services") for path in module_files(package)]
    offenders += [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in below_pages
        for name in imports_of(path)
        if any(under(name, page) for page in PAGE_PACKAGES)
    ]
    assert not offenders, offenders


def test_page_scripts_read_like_the_page():
    long = {
        str(p.relative_to(ROOT)): n
        for p in module_files("app.views")
        if (n := len(p.read_text().splitlines())) > MAX_VIEW_LINES
    }
    assert not long, f"page scripts over {MAX_VIEW_LINES} lines: move their parts into the page's package: {long}"


def test_cache_decorators_live_in_the_services():
    offenders = [
        str(path.relative_to(ROOT))
        for path in module_files("app")
        if not under(module_name(path), "app.services") and any(d in path.read_text() for d in CACHE_DECORATORS)
    ]
    assert not offenders, offenders


TESTS = ROOT / "tests"
MIRRORED = ("app", "engine", "cache", "bench")
BROWSER_TESTS = TESTS / "app" / "browser"  # the real-browser tests of the pages: no source folder of their own


def test_the_tests_mirror_the_source_tree():
    """The tests of `engine/privacy/` are in `tests/engine/privacy/`: every test file lies in `tests/<path>` where
    `<path>` is a folder of the repository under app/, engine/, cache/ or bench/ (or in tests/app/browser/); only
    this file sits directly in tests/."""
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        folder = path.parent.relative_to(TESTS)
        if path == TESTS / "test_architecture.py" or path.parent == BROWSER_TESTS:
            continue
        if not folder.parts:
            offenders.append(f"{path.relative_to(ROOT)}: directly in tests/; move it to the folder of what it tests")
        elif folder.parts[0] not in MIRRORED or not (ROOT / folder).is_dir():
            offenders.append(
                f"{path.relative_to(ROOT)}: {folder}/ is no folder of {', '.join(MIRRORED)} in the repository"
            )
    assert not offenders, offenders


TRAINING_LAYERS = (  # the rooms of engine.training, bottom first (the module docstring says what each holds)
    ("datasets", "features", "features.scatternet", "models", "clipping"),
    ("config",),
    ("noise", "noise_ahead", "features.pca", "augmentation", "averaging", "canary_placement"),
    ("run_results", "canaries"),
    ("algorithms",),
    ("inputs", "run_setup"),
    ("trainers",),
    ("pace",),
)
TRAINING = "engine.training"


def project_modules() -> dict[str, Path]:
    """Every module of app, engine and cache by its dotted name (a package by its own name)."""
    modules = {}
    for path in source_files():
        name = module_name(path)
        modules[name.removesuffix(".__init__")] = path
    return modules


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module → the project modules it imports: every import statement in the file (at module level, under `if
    TYPE_CHECKING:`, inside functions), `from p import m` counted as m where m is a module, relative imports
    resolved. Edges from a package's `__init__` into its own package (the façade re-exporting, or lazily loading,
    its submodules) are not counted, so a submodule may read names its package's `__init__` defines itself."""
    modules = project_modules() if modules is None else modules

    def deepest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(deepest(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".") if package else module.split(".")[:-1]
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets.update(deepest(f"{base}.{alias.name}") for alias in node.names)
        graph[module] = {t for t in targets if t and t != module and not (package and under(t, module))}
    return graph


def training_layer(module: str) -> int | None:
    """The layer of an engine.training module: that of the longest room naming it (None: the façade)."""
    rooms = [
        (len(room), index)
        for index, layer in enumerate(TRAINING_LAYERS)
        for room in layer
        if under(module, f"{TRAINING}.{room}")
    ]
    return max(rooms)[1] if rooms else None


def test_every_training_module_has_a_room():
    homeless = [m for m in project_modules() if under(m, TRAINING) and m != TRAINING and training_layer(m) is None]
    assert not homeless, f"place them in a layer of TRAINING_LAYERS: {homeless}"


def test_the_training_rooms_import_only_downwards():
    offenders = [
        f"{module} (layer {training_layer(module) + 1}) imports {target}"
        + ("" if target == TRAINING else f" (layer {training_layer(target) + 1})")
        for module, targets in import_graph().items()
        if under(module, TRAINING) and module != TRAINING
        for target in sorted(targets)
        if under(target, TRAINING) and (target == TRAINING or training_layer(target) > training_layer(module))
    ]
    assert not offenders, offenders


def test_no_trainer_imports_another():
    trainers = f"{TRAINING}.trainers"
    rooms = {".".join(m.split(".")[:4]) for m in project_modules() if under(m, trainers) and m != trainers}
    offenders = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if under(module, trainers) and under(target, trainers)
        for room in rooms
        if under(target, room) and not under(module, room)
    ]
    assert len(rooms) > 1 and not offenders, offenders


# Cycles allowed, each with its reason (the modules of one cycle, sorted).
ALLOWED_CYCLES = {
    (
        "engine.training.config.reach",
        "engine.training.config.sota_options",
        "engine.training.config.spec",
    ): "the spec's checks take the spec: `spec` calls them while it validates, and they name `RunSpec` only in "
    "annotations (under TYPE_CHECKING)",
}


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(tuple(sorted(component)))
    return cycles


def test_a_cycle_through_type_checking_and_function_level_imports_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    files = {
        "pkg": "from pkg import a, b\n",  # the façade: not counted
        "pkg.a": "def f():\n    from pkg.b import g\n",
        "pkg.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
        "pkg.c": "import pkg\n",
    }
    modules = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "/") + ("/__init__.py" if name == "pkg" else ".py"))
        path.write_text(text)
        modules[name] = path
    graph = import_graph(modules)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg"}}
    assert import_cycles(graph) == [("pkg.a", "pkg.b")]


def test_no_import_cycle():
    cycles = [cycle for cycle in import_cycles(import_graph()) if cycle not in ALLOWED_CYCLES]
    assert not cycles, cycles
    stale = [cycle for cycle in ALLOWED_CYCLES if cycle not in import_cycles(import_graph())]
    assert not stale, f"no longer cycles: drop them from ALLOWED_CYCLES: {stale}"
