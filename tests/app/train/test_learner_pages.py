"""The textbook learners (Dwork & Roth ch. 11) and anisotropic DP-SGD (Xiang et al.) from the dashboard: chosen on
the Train page, trained by a worker on a two-class CSV upload, charted (regret for the online learners), and each a
point on the Compare page's privacy–utility frontier beside DP-SGD."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from app.compare.frames import frontier_points
from app.services import uploads as data_upload
from cache import RunStatus
from engine.jobs.workers.worker import Worker
from tests.apptest_helpers import chart_titles, open_page
from tests.helpers import synthetic_csv, synthetic_schema

SCHEMA = synthetic_schema()


@pytest.fixture
def upload(home):
    return data_upload.save_upload(
        home, file_name="people.csv", data=synthetic_csv(rows=400), raw_schema=SCHEMA, label="People"
    )


def launch(at: AppTest, algorithm: str, dataset: str) -> None:
    at.selectbox(key="train_algorithm").set_value(algorithm).run()
    at.selectbox(key="train_dataset").set_value(dataset).run()
    at.number_input(key="train_delta").set_value(1e-4).run()
    if algorithm in ("rwm_online", "rwm_linear"):
        at.select_slider(key="train_thresholds").set_value(8).run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception


@pytest.mark.parametrize("algorithm", ["expmech_stumps", "sq_laplace", "rwm_online", "rwm_linear", "aniso_dpsgd"])
def test_each_new_algorithm_trains_from_the_train_page_and_joins_the_frontier(home, store, upload, algorithm):
    at = open_page("train")
    launch(at, algorithm, upload.dataset)
    [run] = store.list_runs()
    assert run.spec["algorithm"] == algorithm and run.spec["dataset"] == upload.dataset
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    run = store.get_run(run.id)
    assert run.status is RunStatus.FINISHED, run.error
    assert run.result["epsilon"] <= run.spec["target_epsilon"] + 1e-9  # the tightest accountant, never above
    at.run()
    assert not at.exception, at.exception
    titles = chart_titles(at)
    assert "Accuracy" in titles and "Cumulative privacy loss ε by accountant" in titles
    if algorithm.startswith("rwm"):
        assert "Regret against rounds (private diagnostic)" in titles
    if algorithm == "aniso_dpsgd":
        [diagnostics] = [
            json.loads(c.proto.spec)
            for c in at.get("plotly_chart")
            if "Private diagnostics" in json.loads(c.proto.spec)["layout"]["title"]["text"]
        ]
        assert diagnostics["layout"]["yaxis"]["title"]["text"] == "weighted norm ‖W⁻¹g‖"
    statement = run.result["privacy_statement"]
    assert "Lots:" not in statement if algorithm != "aniso_dpsgd" else "Poisson sampling" in statement
    [point] = frontier_points([run]).to_dict("records")
    assert point["epsilon"] == pytest.approx(run.result["epsilon"]) and 0 <= point["accuracy"] <= 1
