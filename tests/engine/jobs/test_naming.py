"""Generated run and sweep names (engine.jobs.naming), and the CLI's run list that prints them beside the ids."""

from cache import Store
from engine.cli import main
from engine.jobs.naming import generated_run_name, generated_sweep_name
from engine.jobs.submission import submit
from engine.training import parse_spec
from tests.helpers import fast_spec


def test_a_private_run_reads_as_data_model_noise_and_seed():
    spec = fast_spec(target_epsilon=None, noise_multiplier=1.65, seed=0)
    assert generated_run_name(spec) == "digits · logreg · σ 1.65 · seed 0"


def test_a_target_epsilon_names_the_run_before_its_noise():
    assert generated_run_name(fast_spec(noise_multiplier=1.1, seed=3)) == "digits · logreg · ε 3 · seed 3"
    assert generated_run_name(fast_spec(target_epsilon=0.5, seed=1)) == "digits · logreg · ε 0.5 · seed 1"


def test_a_non_private_run_says_so():
    spec = {"dataset": "digits", "model": "mlp", "algorithm": "nonprivate", "lot_size": 64, "seed": 2}
    assert generated_run_name(spec) == "digits · mlp · non-private · seed 2"
    assert generated_run_name(fast_spec(delta=0, algorithm="dpsgd", seed=0)) == "digits · logreg · non-private · seed 0"


def test_another_algorithm_is_named_and_dpsgd_is_not():
    assert generated_run_name(fast_spec(algorithm="noisy_gd", seed=0)) == "digits · logreg · noisy GD · ε 3 · seed 0"
    learner = {"dataset": "adult", "model": "logreg", "algorithm": "rwm_linear", "delta": 1e-5, "target_epsilon": 1}
    assert generated_run_name(learner) == "adult · logreg · linear learner · ε 1"
    stumps = {"dataset": "adult", "model": "logreg", "algorithm": "expmech_stumps", "delta": 1e-5, "seed": 9}
    assert generated_run_name(stumps) == "adult · logreg · exp. mechanism · seed 9"


def test_a_search_seed_reads_in_full():
    assert generated_run_name(fast_spec(seed=811929123)).endswith("seed 811929123")


def test_an_upload_reads_by_its_title_and_never_by_its_path():
    spec = fast_spec(dataset="csv:/srv/lab/uploads/9f2c4e1a.csv", seed=0)
    assert generated_run_name(spec, dataset_title="patients → outcome") == "patients → outcome · logreg · ε 3 · seed 0"
    assert generated_run_name(spec) == "uploaded CSV · logreg · ε 3 · seed 0"
    sweep = {"base": spec, "grid": {"noise_multiplier": [1, 2]}}
    assert generated_sweep_name(sweep) == "uploaded CSV · logreg · noise_multiplier"


def test_a_record_of_another_shape_still_gets_a_name():
    assert generated_run_name({"dataset": ["x"], "model": 3, "seed": True}) == "? · ? · non-private"


def test_a_sweep_reads_as_its_base_and_the_keys_it_varies():
    grid = {"base": fast_spec(dataset="mnist", model="cnn"), "grid": {"noise_multiplier": [1], "lot_size": [64]}}
    assert generated_sweep_name(grid) == "mnist · cnn · noise_multiplier × lot_size"
    search = grid | {"search": {"distribution": "poisson", "mean": 3}}
    assert generated_sweep_name(search) == "mnist · cnn · noise_multiplier × lot_size · private search"
    assert generated_sweep_name({}) == "? · ?"


def test_the_cli_lists_each_run_by_its_name_beside_its_id(home, capsys):
    store = Store(home / "runs.sqlite3")
    named = submit(store, parse_spec(fast_spec(seed=1))).run_id
    by_noise = {key: value for key, value in fast_spec(seed=2).items() if key != "target_epsilon"}
    other = submit(store, parse_spec(by_noise | {"noise_multiplier": 1.65})).run_id
    store.set_run_name(named, "my baseline")
    capsys.readouterr()
    assert main(["runs"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert [part.strip() for part in lines[named].split("  ") if part.strip()][3] == "my baseline"
    assert [part.strip() for part in lines[other].split("  ") if part.strip()][3] == "digits · logreg · σ 1.65 · seed 2"
