"""`python -m engine`: the command line a user (and CI) drives."""

import json

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from tests.helpers import cli, fast_spec, last_json


@pytest.mark.slow
def test_train_prints_result_json_and_caches(home, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(fast_spec()))
    first = last_json(cli(home, "train", str(spec)))
    for key in (
        "test_accuracy",
        "test_loss",
        "epsilon",
        "delta",
        "noise_multiplier",
        "steps",
        "accountant",
        "seconds",
        "cached",
    ):
        assert key in first
    assert first["cached"] is False and first["test_accuracy"] >= 0.85 and first["epsilon"] <= 3.0
    second = last_json(cli(home, "train", str(spec)))
    assert second["cached"] is True and second["run_id"] == first["run_id"]
    forced = last_json(cli(home, "train", str(spec), "--force", "--quiet"))
    assert forced["cached"] is False
    for key in ("test_accuracy", "test_loss", "epsilon", "noise_multiplier", "steps"):
        assert forced[key] == first[key], key


@pytest.mark.slow
def test_submit_worker_runs(home, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(fast_spec(epochs=2)))
    run_id = cli(home, "submit", str(spec)).stdout.strip()
    listed = last_json(cli(home, "runs", "--json"))
    assert [(r["id"], r["status"]) for r in listed] == [(run_id, "queued")]
    assert {"id", "status", "created_at", "error"} <= set(listed[0])
    cli(home, "worker", "--once")
    listed = last_json(cli(home, "runs", "--json"))
    assert listed[0]["status"] == "finished" and listed[0]["error"] is None
    assert last_json(cli(home, "show", run_id))["plan"]["steps"] == 45


@pytest.mark.slow
def test_epsilon_by_one_accountant_or_all_of_them(home):
    args = ["epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1.1", "--steps", "1000", "--delta", "1e-5"]
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 1000)
    by_rdp = last_json(cli(home, *args, "--accountant", "rdp"))
    assert by_rdp["accountant"] == "rdp"
    assert by_rdp["epsilon"] == pytest.approx(RdpAccountant().compose(event).get_epsilon(1e-5), rel=1e-12)
    tightest = last_json(cli(home, *args))
    assert tightest["accountant"] == "pld"
    # PLD picks its grid from the ledger: within 1% of dp-accounting's PLD at the fine 1e-4 grid
    fine = PLDAccountant(value_discretization_interval=1e-4).compose(event).get_epsilon(1e-5)
    assert tightest["epsilon"] == pytest.approx(fine, rel=0.01)
    everything = last_json(cli(home, *args, "--all"))
    assert set(everything["epsilons"]) == {"rdp", "pld", "naive", "advanced"} and "zcdp" in everything["not_applicable"]
    assert everything["epsilon"] == min(everything["epsilons"].values())
    # --dataset-size/--lot-size/--epochs describe the same run: q = 600/60,000, T = 10 / q = 1000 steps.
    same = last_json(
        cli(
            home,
            "epsilon",
            "--dataset-size",
            "60000",
            "--lot-size",
            "600",
            "--epochs",
            "10",
            "--noise-multiplier",
            "1.1",
            "--delta",
            "1e-5",
        )
    )
    assert (same["steps"], same["epsilon"]) == (1000, tightest["epsilon"])


@pytest.mark.slow
def test_calibrate_meets_the_target_by_the_accountant_it_names(home):
    out = last_json(
        cli(home, "calibrate", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "1000")
    )
    sigma = out["noise_multiplier"]
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(sigma)), 1000)
    assert out["accountant"] == "pld"
    spent = PLDAccountant(value_discretization_interval=1e-4).compose(event).get_epsilon(1e-5)
    assert 0.98 * 2.0 <= spent <= 1.01 * 2.0  # the target, spent (the CLI's PLD is within 1% of the fine grid)
    assert RdpAccountant().compose(event).get_epsilon(1e-5) > 2.0  # PLD allows less noise than RDP would
    by_rdp = last_json(
        cli(
            home,
            "calibrate",
            "--epsilon",
            "2",
            "--delta",
            "1e-5",
            "--sampling-rate",
            "0.01",
            "--steps",
            "1000",
            "--accountant",
            "rdp",
        )
    )
    assert by_rdp["noise_multiplier"] > sigma


def test_missing_schedule_arguments_are_named(home):
    proc = cli(home, "epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--steps", "10", check=False)
    assert proc.returncode == 2 and "--sampling-rate" in proc.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps(fast_spec(lot_size=-3)), "lot_size: must be an integer in [1, 1000000]"),
        (json.dumps(fast_spec(delta=0.01)), "delta: must be < 1/N"),
    ],
)
def test_bad_specs_exit_2_with_a_named_error(home, tmp_path, content, message):
    spec = tmp_path / "spec.json"
    spec.write_text(content)
    proc = cli(home, "train", str(spec), check=False)
    assert proc.returncode == 2 and message in proc.stderr


def test_unreachable_calibration_is_an_error_not_garbage(home):
    proc = cli(
        home,
        "calibrate",
        "--epsilon",
        "0.01",
        "--delta",
        "1e-9",
        "--sampling-rate",
        "1",
        "--steps",
        "100000",
        check=False,
    )
    assert proc.returncode == 2 and "unreachable" in proc.stderr


@pytest.mark.slow
def test_algorithms_and_datasets_are_listed_with_description_and_source(home):
    algorithms = last_json(cli(home, "algorithms", "--json"))
    by_name = {a["name"]: a for a in algorithms}
    for name in (
        "dpsgd",
        "noisy_gd",
        "nonprivate",
        "aniso_dpsgd",
        "expmech_stumps",
        "sq_laplace",
        "rwm_online",
        "rwm_linear",
        "dp_pca",
        "logreg",
        "mlp",
        "cnn",
        "adam",
    ):
        assert name in by_name and by_name[name]["description"], name
    cited_sources = [("aniso_dpsgd", "Xiang"), ("expmech_stumps", "Dwork & Roth"), ("rwm_linear", "Dwork & Roth")]
    for name, cited in cited_sources:
        assert cited in by_name[name]["source"] and by_name[name]["keys"], name
    assert by_name["noisy_gd"]["clipping"] == ["gradient", "input"] and "Near & Abuah" in by_name["noisy_gd"]["source"]
    datasets = {d["name"]: d for d in last_json(cli(home, "datasets", "--json"))}
    for name in ("digits", "mnist", "fashion-mnist", "adult", "cifar10", "csv:PATH"):
        assert datasets[name]["description"] and datasets[name]["source"], name
    assert "noisy_gd" in cli(home, "algorithms").stdout


@pytest.mark.slow
def test_nonprivate_run_from_the_cli_reports_no_epsilon(home, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "dataset": "digits",
                "model": "logreg",
                "algorithm": "nonprivate",
                "lot_size": 64,
                "epochs": 3,
                "lr": 0.5,
                "seed": 0,
            }
        )
    )
    result = last_json(cli(home, "train", str(spec), "--quiet"))
    assert result["epsilon"] is None and result["private"] is False and result["test_accuracy"] > 0.9
    assert "ε=∞" in cli(home, "runs").stdout


def test_a_private_search_states_the_epsilon_of_its_best_run(home, tmp_path):
    grid = tmp_path / "grid.json"
    search = {"distribution": "geometric", "mean": 3}
    grid.write_text(json.dumps({"base": fast_spec(epochs=1), "grid": {"lr": [0.5, 1.0, 2.0]}, "search": search}))
    result = last_json(cli(home, "sweep", "--json", str(grid)))
    release = result["release_best"]
    assert release["searching"] and release["private_search"]["configurations"] == 3
    search = release["private_search"]
    assert len(result["run_ids"]) == result["created"] == search["drawn_trials"] >= 1  # a geometric K is never 0
    assert release["epsilon"] == min(search["epsilon"], search["drawn_epsilon"]) > 0  # the tighter after the draw
    assert release["fixed_grid"]["runs"] == 3


@pytest.mark.slow
def test_sklearn_baseline(home):
    result = last_json(cli(home, "baseline", "digits"))
    assert result["test_accuracy"] > 0.9 and result["private"] is False
    assert cli(home, "baseline", "nope", check=False).returncode == 2


def test_sweep_says_how_many_runs_train_in_vectorized_stacks(home, tmp_path, monkeypatch):
    monkeypatch.delenv("DPLAB_STACK_MAX", raising=False)  # the default: at most 8 runs a stack
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"base": fast_spec(epochs=1), "grid": {"target_epsilon": [1.0, 2.0, 4.0]}}))
    line, privacy = cli(home, "sweep", str(grid)).stdout.strip().splitlines()
    assert (
        privacy.startswith("Releasing the best of a fixed grid of 3 runs costs ε = ") and "A private search" in privacy
    )
    assert "Its vectorized stack shared every Poisson lot" in privacy and "trained every point separately" in privacy
    assert line.endswith(
        ": 3 runs (3 queued, 0 cached, 0 already queued); 3 of the queued runs in 1 vectorized "
        "stack (at most 8 runs each)"
    ), line
