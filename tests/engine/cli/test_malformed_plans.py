"""Specs that parse but that no worker could train, because no σ in range meets their target ε: `submit`,
`sweep` and the notebook API plan them before anything is queued, so each is a one-line named error with exit
status 2 (a `PrivacyError` from the API) and the store stays byte for byte as it was. Run names follow the text
rule of spec fields.
"""

import json

import pytest

import engine.api
from app import services
from cache import RunStatus, StoreError
from engine.privacy import PrivacyError
from tests.engine.cli.test_malformed_inputs import (
    digest,
    workspace,  # noqa: F401  (the module's store and folder of input files)
)
from tests.engine.cli.test_malformed_specs import refused
from tests.helpers import fast_spec

# specs whose target ε no σ in [0.05, 500] reaches
UNREACHABLE: dict[str, dict] = {
    "ε 0.01 over 100 epochs": fast_spec(target_epsilon=0.01, epochs=100),
    "ε 0.01 over 1,000 epochs": fast_spec(target_epsilon=0.01, epochs=1000),
    "ε 0.02 over 500 epochs at lot 512": fast_spec(target_epsilon=0.02, epochs=500, lot_size=512),
    "ε 0.01 with δ 1e-12 over 200 epochs": fast_spec(target_epsilon=0.01, delta=1e-12, epochs=200),
    "ε 0.01 on Adult's full batch over 1,000 epochs": {
        **fast_spec(target_epsilon=0.01, epochs=1000),
        "dataset": "adult",
        "delta": 1e-6,
        "lot_size": 30_000,
    },
}


def spec_path(files, case: str, spec: dict):
    path = files / f"unreachable-{abs(hash(case)) % 10**8}.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize("case", sorted(UNREACHABLE))
def test_submit_refuses_a_target_no_sigma_reaches(case, workspace, capsys):  # noqa: F811
    store, files = workspace
    err = refused(["submit", str(spec_path(files, case, UNREACHABLE[case]))], store, capsys)
    assert "target_epsilon" in err and "unreachable" in err, err


@pytest.mark.parametrize("case", sorted(UNREACHABLE)[:2])
def test_sweep_refuses_a_grid_with_a_point_no_sigma_reaches(case, workspace, capsys):  # noqa: F811
    store, files = workspace
    base = {k: v for k, v in UNREACHABLE[case].items() if k != "target_epsilon"}
    grid = {"base": base, "grid": {"target_epsilon": [50, UNREACHABLE[case]["target_epsilon"]]}}
    path = files / f"grid-unreachable-{abs(hash(case)) % 10**8}.json"
    path.write_text(json.dumps(grid))
    sweeps = len(store.list_sweeps())
    err = refused(["sweep", str(path)], store, capsys)
    assert "grid point target_epsilon=" in err and "unreachable" in err, err
    assert len(store.list_sweeps()) == sweeps


def test_the_notebook_api_refuses_it_before_queueing(workspace):  # noqa: F811
    store, _ = workspace
    before = digest(store.path)
    with pytest.raises(PrivacyError, match="unreachable"):
        engine.api.submit(UNREACHABLE["ε 0.01 over 100 epochs"], store=store)
    assert digest(store.path) == before


@pytest.mark.parametrize("name", ["a\x00b", "lone \ud800 surrogate", "\udfff"])
def test_a_run_name_with_a_nul_or_a_lone_surrogate_is_refused(name, workspace, monkeypatch):  # noqa: F811
    store, _ = workspace
    monkeypatch.setattr(services.store, "get_store", lambda: store)
    [run, *_] = store.list_runs(statuses=[RunStatus.FINISHED])
    before = digest(store.path)
    with pytest.raises(StoreError, match="name: must be text without NUL"):
        services.set_run_name(run.id, name)
    assert digest(store.path) == before
