"""The dashboard under Streamlit's AppTest: render, launch, live view, cache badge, runs list."""

import pytest
from streamlit.testing.v1 import AppTest

from cache import RunStatus
from engine.jobs.worker import Worker
from tests.conftest import ROOT

MAIN = str(ROOT / "app" / "main.py")


def open_app() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_train_page_shows_the_working_preset(home):
    at = open_app()
    assert at.title[0].value == "Train a differentially private model"
    shown = metrics(at)
    assert shown["Steps"] == "450" and float(shown["ε after training (RDP)"]) <= 3.0
    assert float(shown["Noise multiplier σ"]) > 1.0
    assert not at.button(key="train").disabled


def test_slider_changes_update_the_plan_but_never_train(home, store):
    at = open_app()
    at.select_slider(key="target_epsilon").set_value(1.0).run()
    at.slider(key="epochs").set_value(10).run()
    shown = metrics(at)
    assert shown["Steps"] == "225" and float(shown["ε after training (RDP)"]) <= 1.0
    at.radio(key="mode").set_value("Noise multiplier σ").run()
    at.select_slider(key="noise_multiplier").set_value(2.0).run()
    assert metrics(at)["Noise multiplier σ"] == "2.000"
    assert store.list_runs() == []


def test_invalid_configuration_is_explained_and_cannot_launch(home):
    at = open_app()
    at.selectbox(key="dataset").set_value("adult").run()
    at.select_slider(key="delta").set_value(1e-4).run()
    assert any("delta: must be < 1/N" in e.value for e in at.error)
    assert at.button(key="train").disabled


def test_train_launches_a_run_then_shows_it_live_and_from_the_cache(home, store):
    at = open_app()
    at.slider(key="epochs").set_value(2).run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    runs = store.list_runs()
    assert len(runs) == 1 and runs[0].status is RunStatus.QUEUED
    assert at.query_params["run"] in (runs[0].id, [runs[0].id])
    assert any("queued" in h.value for h in at.subheader)

    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    at.run()
    assert any("finished" in h.value for h in at.subheader)
    accuracy = float(metrics(at)["Test accuracy"])
    assert accuracy == pytest.approx(store.get_run(runs[0].id).result["test_accuracy"], abs=1e-3)
    assert len(at.get("plotly_chart")) == 3

    at.button(key="train").click().run()  # the identical configuration again
    assert len(store.list_runs()) == 1
    assert any("From the result cache" in s.value for s in at.success)


def test_reload_keeps_the_run(home, store):
    at = open_app()
    at.button(key="train").click().run()
    run_id = store.list_runs()[0].id
    reloaded = AppTest.from_file(MAIN, default_timeout=120)
    reloaded.query_params["run"] = run_id
    reloaded.run()
    assert any(run_id in h.value for h in reloaded.subheader)


def test_runs_page_lists_and_opens_runs(home, store):
    at = open_app()
    at.slider(key="epochs").set_value(1).run()
    at.button(key="train").click().run()
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    at.switch_page("views/runs.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Runs"
    table = next(d.value for d in at.dataframe if "status" in d.value)
    assert list(table["status"]) == ["finished"]
    assert any("finished" in h.value for h in at.subheader)


def test_eta_uses_the_measured_step_rate_not_start_up_time():
    import pandas as pd

    from app.run_panel import remaining_seconds

    frame = pd.DataFrame({"step": [0, 1, 2, 11], "elapsed_s": [None, 5.0, 5.1, 6.0]})
    assert remaining_seconds(frame, 111) == pytest.approx(10.0)  # 0.1 s/step after the first step
    assert remaining_seconds(frame.iloc[:2], 111) is None


def test_live_chart_shows_only_epsilon_already_spent():
    import pandas as pd

    from app.run_panel import spent_so_far
    from cache import RunRecord

    frame = pd.DataFrame({"step": [0, 5, 10, 20], "epsilon": [0, 0.5, 0.8, None], "epsilon_pld": [None, 0.4, 0.7, 1.1]})
    run = RunRecord(id="r", cache_key="k", spec={}, engine_version="t", status=RunStatus.RUNNING, created_at=0,
                    started_at=0, finished_at=None, heartbeat_at=0, worker="w", total_steps=20, progress_step=10,
                    plan=None, result=None, error=None, cancel_requested=False)  # fmt: skip
    shown = spent_so_far(frame, run)
    assert shown["epsilon_pld"].tolist()[1:3] == [0.4, 0.7] and pd.isna(shown["epsilon_pld"].iloc[3])
    assert frame["epsilon_pld"].iloc[3] == 1.1  # the input is not modified
