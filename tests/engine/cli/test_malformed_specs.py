"""Specs and grid specs every door used to accept although no worker could train them: schedules that take lr, C
or σ out of their ranges during the run, gradient canaries beyond the model's trainable coordinates, CSV paths that
are not regular files, and text holding a NUL or an unpaired surrogate. Through `submit`, `train` and `sweep` each
is a one-line named error with exit status 2 that leaves the store byte for byte as it was; the notebook API raises
the same `SpecError`. A relative CSV path is accepted and stored absolute.
"""

import json
import os
import time
from pathlib import Path

import pytest

import engine.api
from engine.cli import main
from engine.jobs.sweep import SweepError
from engine.training import SpecError
from tests.engine.cli.test_malformed_inputs import (
    CSV_GOOD,
    CSV_SCHEMA,
    HANG_BOUND_S,
    csv_spec,
    digest,
    sigma_spec,
    workspace,  # noqa: F401  (the module's store and folder of input files)
)
from tests.helpers import fast_spec

SUR, NUL = "\ud800", "\x00"  # an unpaired surrogate (JSON's "\ud800") and the NUL character
TEXT = ": must be text without NUL"  # what a refused string's message says after its field


def step(factor: float, every: float) -> dict:
    return {"kind": "step", "factor": factor, "every_epochs": every}


def linear(end: float, epochs: float) -> dict:
    return {"kind": "linear", "end_factor": end, "epochs": epochs}


def audited(canaries: int, **overrides) -> dict:
    return fast_spec(audit={"canaries": canaries, "kind": "gradient"}, **overrides)


ADULT_GD = {
    "dataset": "adult",
    "model": "logreg",
    "algorithm": "noisy_gd",
    "noise_multiplier": 2.0,
    "delta": 1e-6,
    "clip_norm": 1.0,
    "epochs": 20,
    "lr": 1.0,
    "seed": 0,
}
NONPRIVATE = {k: v for k, v in fast_spec(algorithm="nonprivate").items() if k not in ("target_epsilon", "delta")}
NONPRIVATE = {k: v for k, v in NONPRIVATE.items() if k != "clip_norm"}
ANISO = sigma_spec(algorithm="aniso_dpsgd")

# (the spec, what the one-line error must say): digits runs 450 steps of 64 over 20 epochs (22.47 steps an epoch)
SPECS: dict[str, tuple[dict, str]] = {
    # σ, C and lr schedules that leave their ranges ([0.05, 500], (0, 1000], (0, 1000]) during the run
    "σ → 1e-300 (given σ)": (sigma_spec(noise_schedule=step(0.001, 0.01)), "noise_schedule: takes σ to 1e-12 at epoch"),
    "σ → 1e-300 (target ε)": (fast_spec(noise_schedule=step(0.001, 0.01)), "noise_schedule: multiplies σ by 1e-12"),
    "σ halved each epoch": (sigma_spec(noise_schedule=step(0.5, 1)), "noise_schedule: takes σ to 0.0312 at epoch 5"),
    "σ doubled each epoch from 100": (
        sigma_spec(noise_multiplier=100.0, noise_schedule=step(2, 1)),
        "noise_schedule: takes σ to 800 at epoch 3",
    ),
    "σ ×10 every 5 epochs from 10": (
        sigma_spec(noise_multiplier=10.0, noise_schedule=step(10, 5)),
        "noise_schedule: takes σ to 1e+03 at epoch 10",
    ),
    "σ ×10 each epoch (target ε)": (fast_spec(noise_schedule=step(10, 1)), "noise_schedule: multiplies σ by 1e+05"),
    "σ ×0.9 every 0.1 epoch": (sigma_spec(noise_schedule=step(0.9, 0.1)), "noise_schedule: takes σ to 0.0471"),
    "σ schedule of noisy GD": (ADULT_GD | {"noise_schedule": step(0.5, 1)}, "noise_schedule: takes σ to 0.0312"),
    "σ schedule of aniso DP-SGD": (ANISO | {"noise_schedule": step(0.5, 2)}, "noise_schedule: takes σ to 0.0312"),
    "lr → 0 (underflow)": (fast_spec(lr_schedule=step(0.001, 0.01)), "lr_schedule: takes lr to 0 at epoch"),
    "lr ×10 each epoch": (fast_spec(lr_schedule=step(10, 1)), "lr_schedule: takes lr to 2e+03 at epoch 3"),
    "lr ramped ×10 in an epoch": (fast_spec(lr=200, lr_schedule=linear(10, 1)), "lr_schedule: takes lr to 1e+03"),
    "lr 999.9 ramped up at step 2": (fast_spec(lr=999.9, lr_schedule=linear(10, 1000)), "(step 2 of 450)"),
    "lr ×5 every 2 epochs": (fast_spec(lr=100, lr_schedule=step(5, 2)), "lr_schedule: takes lr to 2.5e+03 at epoch 4"),
    "lr schedule of the baseline": (NONPRIVATE | {"lr_schedule": step(10, 1)}, "lr_schedule: takes lr to 2e+03"),
    "C ×10 each epoch": (fast_spec(clip_schedule=step(10, 1)), "clip_schedule: takes C to 1e+04 at epoch 4"),
    "C ramped from 500": (fast_spec(clip_norm=500, clip_schedule=linear(10, 1)), "clip_schedule: takes C to"),
    "C → 0 (underflow)": (fast_spec(clip_schedule=step(0.001, 0.01)), "clip_schedule: takes C to 0"),
    "C schedule of noisy GD": (ADULT_GD | {"clip_schedule": step(10, 2)}, "clip_schedule: takes C to 1e+04 at epoch 8"),
    # gradient canaries beyond the model's trainable coordinates (one each)
    "1,000 canaries, digits logreg": (audited(1000), r"audit: canaries must be an integer in [10, 650]"),
    "300 canaries, digits logreg on 20 PCA dims": (
        audited(300, pca_dims=20, pca_noise=7.0),
        "audit: canaries must be an integer in [10, 210]",
    ),
    "25 canaries, digits logreg on 1 PCA dim": (
        audited(25, pca_dims=1, pca_noise=7.0),
        "audit: canaries must be an integer in [10, 20]",
    ),
    "400 canaries, digits mlp of 4": (audited(400, model="mlp", hidden=[4]), "integer in [10, 310]"),
    "100 canaries, digits mlp of 1": (audited(100, model="mlp", hidden=[1]), "integer in [10, 85]"),
    "10,000 canaries, mnist logreg": (audited(10_000, dataset="mnist", lot_size=256), "integer in [10, 7,850]"),
    "30,000 canaries, mnist cnn": (audited(30_000, dataset="mnist", model="cnn", lot_size=256), "[10, 26,010]"),
    "50,000 canaries, mnist on ScatterNet": (
        audited(50_000, dataset="mnist", features="scatternet", lot_size=256),
        "integer in [10, 39,700]",
    ),
    "600 canaries, ScatterNet to 50 PCA dims": (
        audited(600, dataset="mnist", features="scatternet", pca_dims=50, pca_noise=7.0, lot_size=256),
        "integer in [10, 510]",
    ),
    "90,000 canaries, cifar10 cnn": (audited(90_000, dataset="cifar10", model="cnn", lot_size=256), "[10, 37,274]"),
    "300 canaries, adult logreg": (audited(300, dataset="adult", lot_size=256), "integer in [10, 210]"),
    # CSV paths that are not regular files
    "csv path a directory": (csv_spec("."), "not a regular file"),
    "csv path /dev/null": (csv_spec("/dev/null"), "not a regular file"),
    # text with a NUL or an unpaired surrogate, in every kind of string field
    "NUL in a csv path": (csv_spec(f"x{NUL}.csv"), "dataset" + TEXT),
    "surrogate in a csv path": (csv_spec(f"x{SUR}.csv"), "dataset" + TEXT),
    "surrogate in dataset": (fast_spec(dataset=f"digits{SUR}"), "dataset" + TEXT),
    "surrogate in model": (fast_spec(model=f"log{SUR}reg"), "model" + TEXT),
    "NUL in algorithm": (fast_spec(algorithm=f"dpsgd{NUL}"), "algorithm" + TEXT),
    "NUL in optimizer": (fast_spec(optimizer=f"sgd{NUL}"), "optimizer" + TEXT),
    "surrogate in clipping": (fast_spec(clipping=f"flat{SUR}"), "clipping" + TEXT),
    "NUL in noise": (fast_spec(noise=f"reproducible{NUL}"), "noise" + TEXT),
    "surrogate in calibration_accountant": (fast_spec(calibration_accountant=SUR), "calibration_accountant" + TEXT),
    "NUL in features": (fast_spec(features=NUL), "features" + TEXT),
    "surrogate in aniso_granularity": (ANISO | {"aniso_granularity": SUR}, "aniso_granularity" + TEXT),
    "NUL in data_sha256": (fast_spec(data_sha256=NUL), "data_sha256" + TEXT),
    "surrogate in schema.target": (csv_spec("x.csv", schema=CSV_SCHEMA | {"target": SUR}), "schema.target" + TEXT),
    "NUL in a schema class": (
        csv_spec("x.csv", schema=CSV_SCHEMA | {"classes": ["a", NUL]}),
        "schema.classes[1]" + TEXT,
    ),
    "surrogate in a schema column name": (
        csv_spec("x.csv", schema=CSV_SCHEMA | {"numeric": {SUR: [0, 1]}}),
        "schema.numeric: key '\\ud800'" + TEXT,
    ),
    "NUL in audit.kind": (fast_spec(audit={"canaries": 100, "kind": NUL}), "audit.kind" + TEXT),
    "surrogate in a schedule kind": (fast_spec(noise_schedule={"kind": SUR}), "noise_schedule.kind" + TEXT),
    "surrogate in an unknown key": (fast_spec(**{f"x{SUR}": 1}), "key 'x\\ud800'" + TEXT),
    "NUL in a key": (fast_spec(**{f"lr{NUL}": 1}), "key 'lr\\x00'" + TEXT),
}

GRIDS: dict[str, tuple[dict, str]] = {
    "surrogate in the sweep name": ({"name": f"σ{SUR}", "grid": {"lr": [1, 2]}}, "name" + TEXT),
    "NUL in the sweep name": ({"name": f"a{NUL}b", "grid": {"lr": [1, 2]}}, "name" + TEXT),
    "NUL in base.dataset": ({"base": fast_spec(dataset=f"digits{NUL}"), "grid": {"lr": [1]}}, "base.dataset" + TEXT),
    "surrogate in a grid value": ({"grid": {"optimizer": ["sgd", f"ad{SUR}"]}}, "grid.optimizer[1]" + TEXT),
    "NUL in a grid key": ({"grid": {f"l{NUL}r": [1, 2]}}, "grid: key 'l\\x00r'" + TEXT),
    "surrogate in on_worker_lost": ({"on_worker_lost": SUR, "grid": {"lr": [1]}}, "on_worker_lost" + TEXT),
    "NUL in search.distribution": (
        {"search": {"distribution": NUL, "mean": 4}, "grid": {"lr": [1, 2]}},
        "search.distribution" + TEXT,
    ),
    "surrogate in a base key": ({"base": fast_spec(**{SUR: 1}), "grid": {"lr": [1]}}, "base: key '\\ud800'" + TEXT),
    "σ schedule of the base out of range": (
        {"base": sigma_spec(noise_schedule=step(0.5, 1)), "grid": {"lr": [1, 2]}},
        "noise_schedule: takes σ to 0.0312",
    ),
    "σ schedule out of range at one σ": (
        {"base": sigma_spec(epochs=3, noise_schedule=step(0.2, 1)), "grid": {"noise_multiplier": [2.0, 1.0]}},
        "grid point noise_multiplier=1.0, seed=0: noise_schedule: takes σ to 0.04 at epoch 2",
    ),
    "lr schedule out of range at one lr": (
        {"base": fast_spec(lr_schedule=step(10, 5)), "grid": {"lr": [1.0, 200.0]}},
        "grid point lr=200.0, seed=0: lr_schedule: takes lr to 2e+03 at epoch 5",
    ),
    "C schedule out of range at one C": (
        {"base": fast_spec(clip_schedule=linear(10, 2)), "grid": {"clip_norm": [1.0, 150.0]}},
        "grid point clip_norm=150.0, seed=0: clip_schedule: takes C to",
    ),
    "1,000 canaries on one of two models": (
        {"base": audited(1000), "grid": {"model": ["mlp", "logreg"]}},
        'grid point model="logreg", seed=0: audit: canaries must be an integer in [10, 650]',
    ),
    "500 canaries on one of two PCA dims": (
        {"base": audited(500, pca_noise=7.0), "grid": {"pca_dims": [60, 10]}},
        "grid point pca_dims=10, seed=0: audit: canaries must be an integer in [10, 110]",
    ),
    "100,000 canaries in the base": ({"base": audited(100_000), "grid": {"lr": [1, 2]}}, "integer in [10, 650]"),
    "csv path a directory in the base": ({"base": csv_spec("."), "grid": {"lr": [1, 2]}}, "not a regular file"),
    "canaries over a search": (
        {"base": audited(1000), "search": {"distribution": "poisson", "mean": 4}, "grid": {"lr": [1, 2]}},
        "audit: canaries must be an integer in [10, 650]",
    ),
}


ARGUMENTS: dict[str, tuple[list[str], str]] = {  # run and sweep ids typed on the command line
    "show a run id with a surrogate": (["show", f"r{SUR}"], "argument run" + TEXT),
    "show a run id with an escaped byte": (["show", "r\udcff"], "argument run" + TEXT),  # argv of a non-UTF-8 byte
    "cancel a run id with a NUL": (["cancel", f"r{NUL}"], "argument run" + TEXT),
    "runs of a sweep id with a surrogate": (["runs", "--sweep", f"s{SUR}"], "argument --sweep" + TEXT),
}


def test_at_least_60_new_malformed_inputs():
    assert len(SPECS) + len(GRIDS) + len(ARGUMENTS) >= 60, len(SPECS) + len(GRIDS) + len(ARGUMENTS)


def write(files: Path, case: str, content: dict) -> Path:
    path = files / f"case-{abs(hash(case)) % 10**12}.json"
    path.write_text(json.dumps(content), encoding="utf-8")  # ensure_ascii: "\ud800" and "\u0000" as JSON escapes
    return path


def refused(argv: list[str], store, capsys) -> str:
    """The one error line of a command that must be refused with status 2 leaving the store as it was."""
    before = digest(store.path)
    started = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err[:2000]
    assert err.startswith("error: ") and err.count("\n") == 1, err[:2000]
    assert digest(store.path) == before, "the store changed"
    assert elapsed < HANG_BOUND_S, f"{elapsed:.1f} s: a hang or unbounded work"
    return err


@pytest.mark.parametrize("command", ["submit", "train"])
@pytest.mark.parametrize("case", list(SPECS))
def test_a_spec_no_worker_can_train_is_refused_naming_the_field(command, case, workspace, capsys):  # noqa: F811
    store, files = workspace
    content, mentions = SPECS[case]
    err = refused([command, str(write(files, case, content))], store, capsys)
    assert mentions in err, err


@pytest.mark.parametrize("case", list(GRIDS))
def test_a_grid_spec_no_worker_can_train_is_refused_naming_the_field(case, workspace, capsys):  # noqa: F811
    store, files = workspace
    content, mentions = GRIDS[case]
    grid = {"base": fast_spec(), **content}
    err = refused(["sweep", str(write(files, case, grid))], store, capsys)
    assert mentions in err, err


@pytest.mark.parametrize("case", list(ARGUMENTS))
def test_an_id_the_store_cannot_hold_is_refused_naming_the_argument(case, workspace, capsys):  # noqa: F811
    store, _ = workspace
    argv, mentions = ARGUMENTS[case]
    assert mentions in refused(argv, store, capsys)


@pytest.mark.parametrize(
    "case", ["σ → 1e-300 (given σ)", "1,000 canaries, digits logreg", "NUL in a csv path", "surrogate in model"]
)
def test_the_notebook_api_refuses_the_same_specs(case, workspace):  # noqa: F811
    store, _ = workspace
    content, mentions = SPECS[case]
    before = digest(store.path)
    with pytest.raises(SpecError) as raised:
        engine.api.submit(content, store=store)
    assert mentions in str(raised.value)
    assert digest(store.path) == before


def test_a_grid_point_error_is_a_sweep_error_naming_the_point(workspace):  # noqa: F811
    store, _ = workspace
    from engine.jobs.sweep import submit_sweep

    content, _ = GRIDS["1,000 canaries on one of two models"]
    with pytest.raises(SweepError, match="grid point model"):
        submit_sweep(store, {"base": fast_spec(), **content})


EDGES = {  # (a spec on the edge of what trains, one just past it)
    "gradient canaries": (audited(650), audited(651)),
    "input canaries take no coordinate": (
        fast_spec(audit={"canaries": 5000, "kind": "input"}),
        fast_spec(audit={"canaries": 5000, "kind": "gradient"}),
    ),
    "σ ends at 0.05": (  # 0.4 / 8 = 0.05 from epoch 1, and / 64 from epoch 2
        sigma_spec(noise_multiplier=0.4, epochs=1.9, noise_schedule=step(0.125, 1)),
        sigma_spec(noise_multiplier=0.4, epochs=2.1, noise_schedule=step(0.125, 1)),
    ),
    "C ends at 1,000": (  # 10³ from epoch 3, 10⁴ from epoch 4
        fast_spec(clip_schedule=step(10, 1), epochs=3.9),
        fast_spec(clip_schedule=step(10, 1), epochs=4.1),
    ),
    "lr ends at 1,000": (
        fast_spec(lr=100, lr_schedule=linear(10, 10)),
        fast_spec(lr=100.5, lr_schedule=linear(10, 10)),
    ),
}


@pytest.mark.parametrize("edge", list(EDGES))
def test_the_edge_trains_and_one_past_it_is_refused(edge):
    on_edge, past = EDGES[edge]
    engine.api.spec(on_edge)
    with pytest.raises(SpecError):
        engine.api.spec(past)


def test_a_target_epsilon_calibrates_a_sigma_whose_schedule_stays_in_range():
    """σ × 0.01 in the second half: the smallest σ meeting ε = 3 among those that keep every phase in [0.05, 500]
    (the calibration no longer tries a base σ whose schedule leaves the range)."""
    plan = engine.api.plan(fast_spec(noise_schedule=step(0.01, 10)))
    sigmas = [plan.noise_multiplier * factor for factor, _ in plan.noise_phases]
    assert len(sigmas) == 2 and all(0.05 <= sigma <= 500 for sigma in sigmas), sigmas
    assert engine.api.epsilons(plan.ledger(), delta=plan.delta, accountants=["rdp"])["rdp"] <= 3.0


def test_a_relative_csv_path_is_stored_absolute(workspace, capsys, monkeypatch, tmp_path):  # noqa: F811
    store, files = workspace
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "people.csv").write_text("\n".join(CSV_GOOD) + "\n", encoding="utf-8")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = csv_spec("../data/people.csv", seed=41)
    assert main(["submit", "--json", str(write(files, "relative csv", spec))]) == 0, capsys.readouterr().err
    run_id = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["id"]
    stored = store.get_run(run_id).spec
    absolute = str(folder / "people.csv")
    assert stored["dataset"] == f"csv:{absolute}" and os.path.isabs(absolute)
    by_absolute = engine.api.spec(csv_spec(absolute, seed=41))
    assert by_absolute.to_dict() == stored  # the same run: the same cache key, the same data_sha256
    monkeypatch.chdir(tmp_path)  # a worker started elsewhere reads the same file
    assert engine.api.spec(stored).to_dict() == stored
    (folder / "people.csv").write_text("\n".join(CSV_GOOD[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"data_sha256: .*people\.csv changed"):
        engine.api.spec(stored)  # the content is still pinned
