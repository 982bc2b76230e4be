"""The project's dependency direction, enforced.

app → engine, cache; engine.jobs → engine.training, engine.privacy, cache; engine.training →
engine.privacy. Nothing in engine/ or cache/ imports streamlit, plotly or matplotlib; engine.privacy imports
no torch.
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
