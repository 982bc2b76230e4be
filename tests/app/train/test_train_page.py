"""The dashboard under Streamlit's AppTest: render, presets, the algorithm switch, launch, live view, cache
badge, private diagnostics, non-private baselines, runs list."""

import base64

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app.common.labels import ALGORITHMS
from app.common.safe_text import unescape
from app.train.presets import PRESETS
from app.train.widget_spec import learner
from cache import RunStatus
from engine.jobs.naming import generated_run_name
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec, plan_spec
from tests.apptest_helpers import MAIN, chart_specs, chart_titles, metrics, open_app, train_form_spec
from tests.helpers import fast_spec

WIDGET_KINDS = ("selectbox", "select_slider", "slider", "radio", "checkbox", "number_input", "button")


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    """Datasets other than the built-in digits are absent unless a test provides them."""
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def labels(at: AppTest) -> set[str]:
    return {w.label for kind in WIDGET_KINDS for w in getattr(at, kind)}


def points(values: list | dict) -> int:
    """The length of a trace's coordinate array (Plotly sends numeric arrays base64-encoded)."""
    if isinstance(values, dict):
        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]))
    return len(values)


def preset_named(fragment: str) -> str:
    return next(name for name in PRESETS if fragment in name)


def pick_preset(at: AppTest, fragment: str) -> AppTest:
    at.selectbox(key="train_preset").set_value(preset_named(fragment)).run()
    assert not at.exception, at.exception
    return at


def test_train_page_shows_the_working_preset(home):
    at = open_app()
    assert at.title[0].value == "Train a differentially private model"
    shown = metrics(at)
    assert shown["Steps"] == "450" and float(shown["ε after training (RDP)"]) <= 3.0
    assert float(shown["Noise multiplier σ"]) > 1.0
    assert not at.button(key="train").disabled
    assert train_form_spec(at) == fast_spec()
    [planned] = [spec for spec in chart_specs(at) if spec["layout"]["title"]["text"].startswith("Planned ε")]
    [curve] = planned["data"]
    epsilons = (
        np.frombuffer(base64.b64decode(curve["y"]["bdata"]), curve["y"]["dtype"])
        if "bdata" in str(curve["y"])
        else np.asarray(curve["y"])
    )
    assert curve["x"][0] == 0 and curve["x"][-1] == 450  # the whole run, from its start
    assert np.all(np.diff(epsilons) >= 0) and epsilons[-1] == pytest.approx(
        float(shown["ε after training (RDP)"]), abs=5e-4
    )


def test_every_widget_explains_itself_in_a_tooltip(home):
    at = open_app()
    at.selectbox(key="train_model").set_value("mlp").run()
    at.checkbox(key="train_use_pca").check().run()
    at.selectbox(key="train_lr_schedule").set_value("linear").run()
    for algorithm in ALGORITHMS:
        at.selectbox(key="train_algorithm").set_value(algorithm).run()
        assert not at.exception, at.exception
        widgets = [w for kind in WIDGET_KINDS for w in getattr(at, kind) if (w.key or "").startswith("train")]
        assert len(widgets) >= (7 if learner(algorithm) else 10), algorithm
        for widget in widgets:
            assert widget.help and len(widget.help) > 20, f"{algorithm}: {widget.label!r} has no tooltip"


def test_slider_changes_update_the_plan_but_never_train(home, store):
    at = open_app()
    at.number_input(key="train_target_epsilon").set_value(1.0).run()
    at.number_input(key="train_epochs").set_value(10).run()
    shown = metrics(at)
    assert shown["Steps"] == "225" and float(shown["ε after training (RDP)"]) <= 1.0
    at.radio(key="train_mode").set_value("Noise multiplier σ").run()
    at.number_input(key="train_noise_multiplier").set_value(2.0).run()
    assert metrics(at)["Noise multiplier σ"] == "2.000"
    at.selectbox(key="train_preset").set_value(preset_named("Adult: noisy")).run()
    assert store.list_runs() == []


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_fills_a_valid_spec(home, name):
    at = open_app()
    at.selectbox(key="train_preset").set_value(name).run()
    assert not at.exception, at.exception
    spec = train_form_spec(at)
    assert parse_spec(spec).to_dict() == parse_spec(PRESETS[name].spec).to_dict()
    assert not at.error, [e.value for e in at.error]
    plan = plan_spec(parse_spec(spec))
    assert metrics(at)["Steps"] == f"{plan.steps:,}"
    notes = [w.value for w in at.warning if "not downloaded" in w.value]
    if spec["dataset"] == "digits":
        assert not notes
    else:  # no data directory holds the files in this test: a note, and the plan still shows
        assert len(notes) == 1 and "download" in notes[0]


def test_presets_are_the_benchmarked_settings():
    from bench.table_rows import ABADI_ROWS
    from bench.utility_runs import ABADI_MNIST, ADULT_PRESET, DIGITS_DEMO_SPEC, NOISY_GD, OPACUS
    from engine.privacy import final_epsilon

    assert PRESETS[preset_named("Digits demo")].spec == DIGITS_DEMO_SPEC
    assert PRESETS[preset_named("Adult: DP-SGD")].spec == ADULT_PRESET
    assert PRESETS[preset_named("Opacus")].spec == OPACUS[0].spec
    noisy = next(r for r in NOISY_GD if r.name == "adult_noisy_gd_gradient_clip_eps1")
    assert PRESETS[preset_named("Adult: noisy")].spec == noisy.spec
    abadi = next(r for r in ABADI_ROWS if r.epsilon == 2.0)
    ours = PRESETS[preset_named("Abadi")].spec
    filled = {"seed": 0, "target_epsilon": abadi.epsilon, "fill_budget": True, "epochs": ABADI_MNIST[1].max_epochs}
    assert ours == abadi.spec | filled  # the table's row, spending its budget as the table does
    plan = plan_spec(parse_spec(ours))
    assert plan.filled_by in ("rdp", "pld") and plan.steps < plan.steps_cap  # the budget, not the cap, ended it
    assert final_epsilon(plan.ledger(), delta=plan.delta, accountant_name=plan.filled_by) <= abadi.epsilon


def test_present_dataset_files_need_no_note(home, tmp_path, monkeypatch):
    data = tmp_path / "data"
    for relpath in ("adult/adult.data", "adult/adult.test"):
        (data / relpath).parent.mkdir(parents=True, exist_ok=True)
        (data / relpath).write_text("")
    monkeypatch.setenv("DPLAB_DATA_DIR", str(data))
    at = pick_preset(open_app(), "Adult: DP-SGD")
    assert not [w for w in at.warning if "not downloaded" in w.value]
    assert at.selectbox(key="train_dataset").options[:2] == ["Digits (8×8, built-in)", "UCI Adult (census income)"]


def test_algorithm_switch_shows_only_the_keys_that_apply(home):
    at = open_app()
    dpsgd = labels(at)
    assert {"Target ε", "δ", "Clipping norm C", "Lot size L", "Epochs", "Learning rate"} <= dpsgd
    assert "ε of the noisy count" not in dpsgd

    at.selectbox(key="train_algorithm").set_value("noisy_gd").run()
    noisy = labels(at)
    assert {"Target ε", "δ", "Clipping bound b", "ε of the noisy count"} <= noisy
    assert "Lot size L" not in noisy and "Batch size" not in noisy  # full batch
    assert at.selectbox(key="train_dataset").value == "adult"  # the one two-class dataset
    assert at.selectbox(key="train_model").options == ["Logistic regression"]
    assert set(train_form_spec(at)) >= {"count_epsilon", "clip_norm", "delta"} and "lot_size" not in train_form_spec(at)

    at.selectbox(key="train_algorithm").set_value("nonprivate").run()
    plain = labels(at)
    assert not {"Target ε", "δ", "Clipping norm C", "Noise multiplier σ"} & plain
    assert "Batch size" in plain
    assert metrics(at)["ε"] == "∞"
    assert "delta" not in train_form_spec(at) and "clip_norm" not in train_form_spec(at)

    at.selectbox(key="train_algorithm").set_value("dpsgd").run()  # values come back as they were
    assert at.number_input(key="train_clip_norm").value == 1.0 and at.number_input(key="train_delta").value == 1e-5


def test_models_fit_the_dataset(home):
    at = open_app()
    assert "cnn" not in at.selectbox(key="train_model").options  # 8×8 digits are too small for the CNN
    at.selectbox(key="train_dataset").set_value("mnist").run()
    assert at.selectbox(key="train_model").options == [
        "Logistic regression",
        "MLP (one ReLU hidden layer)",
        "CNN (tanh)",
        "Wide ResNet (GroupNorm)",
    ]
    at.selectbox(key="train_model").set_value("cnn").run()
    assert "Project inputs with PCA (DP-PCA)" not in labels(at)  # PCA feeds logreg or mlp, not the CNN
    at.selectbox(key="train_dataset").set_value("adult").run()
    assert not at.exception and at.selectbox(key="train_model").value == "logreg"
    assert not at.error


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"train_dataset": "adult", "train_delta": 1e-4}, "delta: must be < 1/N"),
        ({"train_lot_size": 2048}, "lot_size: must be an integer in [1, 1438]"),
        ({"train_dataset": "mnist", "train_lot_size": 8, "train_epochs": 400}, "epochs:"),
        ({"train_target_epsilon": 0.1, "train_epochs": 400, "train_lot_size": 1024}, "target_epsilon=0.1 is unreach"),
    ],
)
def test_invalid_configurations_are_explained_and_cannot_launch(home, store, changes, message):
    at = open_app()
    for key, value in changes.items():
        kinds = ("selectbox", "select_slider", "number_input")
        widget = next(w for kind in kinds for w in getattr(at, kind) if w.key == key)
        widget.set_value(value).run()
        assert not at.exception, at.exception
    assert any(message in unescape(e.value) for e in at.error), [e.value for e in at.error]  # engine text: escaped
    assert at.button(key="train").disabled  # AppTest, like a browser, cannot press it
    assert store.list_runs() == []


def test_noisy_gd_and_nonprivate_launches_create_runs(home, store):
    at = open_app()
    at.selectbox(key="train_algorithm").set_value("noisy_gd").run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    at.selectbox(key="train_algorithm").set_value("nonprivate").run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    runs = {r.spec["algorithm"]: r for r in store.list_runs()}
    assert set(runs) == {"noisy_gd", "nonprivate"}
    assert runs["noisy_gd"].spec["dataset"] == "adult" and "lot_size" not in runs["noisy_gd"].spec
    assert "delta" not in runs["nonprivate"].spec and runs["nonprivate"].status is RunStatus.QUEUED
    assert at.query_params["run"] in (runs["nonprivate"].id, [runs["nonprivate"].id])


def test_train_launches_a_run_then_shows_it_live_with_diagnostics_and_baselines(home, store):
    at = open_app()
    at.number_input(key="train_epochs").set_value(2).run()
    at.selectbox(key="train_algorithm").set_value("nonprivate").run()  # a reference first
    at.button(key="train").click().run()
    at.selectbox(key="train_algorithm").set_value("dpsgd").run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    private = next(r for r in store.list_runs() if r.spec["algorithm"] == "dpsgd")
    assert private.status is RunStatus.QUEUED
    assert at.query_params["run"] in (private.id, [private.id])
    assert any("queued" in h.value for h in at.subheader)

    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    at.run()
    assert any("finished" in h.value for h in at.subheader)
    accuracy = float(metrics(at)["Test accuracy"])
    assert accuracy == pytest.approx(store.get_run(private.id).result["test_accuracy"], abs=1e-3)
    titles = chart_titles(at)
    assert titles[:3] == ["Planned ε over the run (RDP)", "Accuracy", "Cumulative privacy loss ε by accountant"]
    assert "Private diagnostics — computed on private data, not released" in titles
    specs = {spec["layout"]["title"]["text"]: spec for spec in chart_specs(at)}
    diagnostics = {t["name"]: t for t in specs["Private diagnostics — computed on private data, not released"]["data"]}
    assert {"median norm", "norms p10–p90", "fraction clipped (right axis)"} <= set(diagnostics)
    total_steps = store.get_run(private.id).total_steps
    assert points(diagnostics["median norm"]["x"]) == total_steps  # every step of the run
    accuracy_chart = specs["Accuracy"]
    lot_trace = next(t for t in accuracy_chart["data"] if "private, not released" in t["name"])
    assert points(lot_trace["x"]) == total_steps
    baseline = store.list_runs(statuses=[RunStatus.FINISHED])
    nonprivate = next(r for r in baseline if r.spec["algorithm"] == "nonprivate")
    references = reference_names(accuracy_chart)  # named in the legend, not written over the curves
    floor = next(r for r in references if r.startswith("majority class: "))  # digits: ten balanced classes
    assert 0.1 <= float(floor.removeprefix("majority class: ")) < 0.2
    name = generated_run_name(nonprivate.spec)
    assert references == [f"non-private run “{name}”: {nonprivate.result['test_accuracy']:.3f}", floor]

    at.button(key=f"baseline-{private.id}").click().run()  # fit scikit-learn's baseline, only on request
    assert not at.exception, at.exception
    specs = {spec["layout"]["title"]["text"]: spec for spec in chart_specs(at)}
    references = reference_names(specs["Accuracy"])
    assert len(references) == 3 and references[2].startswith("scikit-learn logistic regression: 0.9")
    assert not [b for b in at.button if b.key == f"baseline-{private.id}"]

    at.button(key="train").click().run()  # the identical configuration again
    assert len(store.list_runs()) == 2
    assert any("From the result cache" in s.value for s in at.success)

    at.query_params["run"] = nonprivate.id  # the baseline's own panel: no ε, no private diagnostics
    at.run()
    assert chart_titles(at)[1:] == ["Accuracy", "Training loss"]  # after the form's planned ε: not private
    assert metrics(at)["ε spent"] == "∞"


def reference_names(chart: dict) -> list[str]:
    """The dashed reference lines of an accuracy chart, by their legend names."""
    return [t["name"] for t in chart["data"] if (t.get("line") or {}).get("dash") == "dash"]


def test_reload_keeps_the_run(home, store):
    at = open_app()
    at.button(key="train").click().run()
    run_id = store.list_runs()[0].id
    reloaded = AppTest.from_file(MAIN, default_timeout=120)
    reloaded.query_params["run"] = run_id
    reloaded.run()
    assert any(run_id in c.value for c in reloaded.caption)


def test_runs_page_lists_and_opens_runs(home, store):
    at = open_app()
    at.number_input(key="train_epochs").set_value(1).run()
    at.button(key="train").click().run()
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    at.switch_page("views/runs.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Runs"
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert list(table["status"]) == ["finished"]
    assert any("finished" in h.value for h in at.subheader)


def test_the_noise_mode_goes_into_the_spec_and_the_run_panel_names_it(home, store):
    at = open_app()
    radio = at.radio(key="train_noise")
    assert radio.value == "reproducible" and "cryptographic randomness" in radio.help
    assert "noise" not in train_form_spec(at)  # the lab mode is the engine's default
    radio.set_value("release").run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["noise"] == "release" and train_form_spec(at)["noise"] == "release"
    assert any("release noise (OS randomness" in unescape(c.value) for c in at.caption)


def test_eta_uses_the_measured_step_rate_not_start_up_time():
    import pandas as pd

    from app.common.results import remaining_seconds

    frame = pd.DataFrame({"step": [0, 1, 2, 11], "elapsed_s": [None, 5.0, 5.1, 6.0]})
    assert remaining_seconds(frame, 111) == pytest.approx(10.0)  # 0.1 s/step after the first step
    assert remaining_seconds(frame.iloc[:2], 111) is None


def test_no_eta_before_the_pace_is_measured():
    """Three fast steps after a slow start would promise 1 s; the first estimate waits for ten steps and a second."""
    import pandas as pd

    from app.common.results import remaining_seconds

    early = pd.DataFrame({"step": [1, 2, 3, 4], "elapsed_s": [5.0, 5.01, 5.02, 5.03]})
    assert remaining_seconds(early, 1000) is None
    measured = pd.DataFrame({"step": [1, 50, 100], "elapsed_s": [5.0, 5.6, 6.0]})
    assert remaining_seconds(measured, 1000) == pytest.approx(1.0 / 99 * 900)


def test_live_chart_shows_only_epsilon_already_spent():
    import pandas as pd

    from app.common.run_panel import spent_so_far
    from cache import RunRecord

    frame = pd.DataFrame({"step": [0, 5, 10, 20], "epsilon": [0, 0.5, 0.8, None], "epsilon_pld": [None, 0.4, 0.7, 1.1]})
    run = RunRecord(
        id="r",
        cache_key="k",
        spec={},
        engine_version="t",
        status=RunStatus.RUNNING,
        created_at=0,
        started_at=0,
        finished_at=None,
        heartbeat_at=0,
        worker="w",
        total_steps=20,
        progress_step=10,
        plan=None,
        result=None,
        error=None,
        cancel_requested=False,
    )
    shown = spent_so_far(frame, run)
    assert shown["epsilon_pld"].tolist()[1:3] == [0.4, 0.7] and pd.isna(shown["epsilon_pld"].iloc[3])
    assert frame["epsilon_pld"].iloc[3] == 1.1  # the input is not modified


def test_diagnostics_figure_draws_the_quantile_band_in_the_run_colour():
    import pandas as pd

    from app.common.charts import private_diagnostics_figure, run_color, thin

    frame = pd.DataFrame(
        {
            "step": [1, 2, 3],
            "grad_norm_p10": [0.5, 0.4, 0.3],
            "grad_norm_p50": [1.0, 0.9, 0.8],
            "grad_norm_p90": [2.0, 1.8, 1.5],
            "clip_fraction": [0.6, 0.5, 0.4],
        }
    )
    color = run_color("abc")
    fig = private_diagnostics_figure(frame, color=color, total_steps=10, clip_norm=1.0)
    traces = {t.name: t for t in fig.data}
    assert list(traces["median norm"].y) == pytest.approx([1.0, 0.95, 0.9])  # mean of the steps so far (of 20)
    assert traces["median norm"].line.color == color
    assert traces["norms p10–p90"].fill == "tonexty" and traces["fraction clipped (right axis)"].yaxis == "y2"
    assert fig.layout.annotations[0].text == "C = 1"
    old_run = private_diagnostics_figure(frame[["step", "clip_fraction"]], color=color)  # stored before the norms
    assert [t.name for t in old_run.data] == ["fraction clipped (right axis)"]
    long = pd.DataFrame({"step": range(10_001), "value": 0.0})
    thinned = thin(long, 2000)
    assert len(thinned) <= 2001 and thinned["step"].iloc[-1] == 10_000


@pytest.mark.parametrize("algorithm", ["expmech_stumps", "sq_laplace", "rwm_online", "rwm_linear"])
def test_a_textbook_learner_shows_its_mechanism_parameter_and_launches(home, store, algorithm):
    at = open_app()
    at.selectbox(key="train_algorithm").set_value(algorithm).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="train_dataset").value == "adult"  # the two-class dataset (digits has ten)
    assert not [
        w
        for kind in ("select_slider", "number_input")
        for w in getattr(at, kind)
        if w.key in ("train_lot_size", "train_clip_norm")
    ]
    plan = plan_spec(parse_spec(train_form_spec(at)))
    (name, value), *_ = plan.learner_parameters
    label = {
        "expmech_epsilon": "ε of the exponential mechanism",
        "query_epsilon": "ε per statistical query",
        "eta": "Learning rate η",
    }[name]
    assert metrics(at)[label] == f"{value:.4g}"
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["algorithm"] == algorithm and run.status is RunStatus.QUEUED
