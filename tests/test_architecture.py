"""The dependency direction of DEVELOPERS.md, enforced.

app → engine, cache; engine.jobs → engine.training, engine.privacy, cache; engine.training →
engine.privacy. Nothing in engine/ or cache/ imports streamlit or plotly; engine.privacy imports
no torch.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

UI_LIBRARIES = {"streamlit", "plotly"}
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
