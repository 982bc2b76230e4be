"""Specs with the keys of state-of-the-art DP-SGD (`augmentation_multiplicity`, `ema_decay`, `fill_budget`) that no
worker could train: through `submit` and `sweep` each is a one-line named error with exit status 2 that leaves the
store byte for byte as it was."""

import json

import pytest

from cache import Store
from tests.engine.cli.test_malformed_specs import refused
from tests.helpers import fast_spec


def sigma_spec(**changes) -> dict:
    return {k: v for k, v in fast_spec().items() if k != "target_epsilon"} | {"noise_multiplier": 1.0} | changes


SPECS: dict[str, tuple[dict, str]] = {
    "K = 0": (fast_spec(augmentation_multiplicity=0), "augmentation_multiplicity: must be an integer in [1, 64]"),
    "K = 4 on Adult": (
        fast_spec(dataset="adult", delta=1e-6, augmentation_multiplicity=4),
        "augmentation_multiplicity: must be 1 for 'adult'",
    ),
    "K = 4 after PCA": (
        fast_spec(pca_dims=10, pca_noise=4.0, augmentation_multiplicity=4),
        "augmentation_multiplicity: must be 1 with pca_dims",
    ),
    "β = 1": (fast_spec(ema_decay=1), "ema_decay: must be a number in [0, 1)"),
    "fill_budget without σ": (fast_spec(fill_budget=True), "noise_multiplier: missing: fill_budget needs both"),
    "fill_budget as text": (sigma_spec(target_epsilon=3.0, fill_budget="true"), "fill_budget: must be true or false"),
    "a budget below one step": (
        sigma_spec(noise_multiplier=0.3, target_epsilon=0.05, fill_budget=True),
        "target_epsilon=0.05 is unreachable with fill_budget",
    ),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """An empty store (DPLAB_HOME points at it for the whole module) and a folder for the input files."""
    root = tmp_path_factory.mktemp("sota")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPLAB_HOME", str(root / "home"))
        store = Store(root / "home" / "runs.sqlite3")
        files = root / "files"
        files.mkdir()
        yield store, files


@pytest.mark.parametrize("case", list(SPECS))
def test_submit_refuses_the_spec_naming_the_key(case, workspace, capsys):
    store, files = workspace
    spec, message = SPECS[case]
    path = files / f"spec-{list(SPECS).index(case)}.json"
    path.write_text(json.dumps(spec))
    err = refused(["submit", str(path)], store, capsys)
    assert message in err, err


def test_a_sweep_with_a_point_below_one_step_is_refused(workspace, capsys):
    store, files = workspace
    grid = {"base": sigma_spec(target_epsilon=0.05, fill_budget=True), "grid": {"noise_multiplier": [5.0, 0.3]}}
    path = files / "grid.json"
    path.write_text(json.dumps(grid))
    err = refused(["sweep", str(path)], store, capsys)
    assert "grid point noise_multiplier=0.3" in err and "unreachable with fill_budget" in err, err
