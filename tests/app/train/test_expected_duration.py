"""The Train page's expected duration: from a pace measured here (faked: tests must not depend on this CPU), or
from a finished run of the same shape; on a CPU a long run is said to be long, and the short variant's button
sets the form to fewer epochs at the same ε, which brings the estimate under the warning's threshold."""

import pytest

from app.services import duration as duration_service
from app.train import duration as duration_page
from app.train.duration import LONG_ON_CPU_S
from app.train.presets import PRESETS
from engine.jobs.workers.worker import Worker
from engine.training.pace import Pace
from tests.apptest_helpers import metrics, open_app

OPACUS = next(name for name in PRESETS if name.startswith("Opacus MNIST"))  # 3,750 steps, σ given
SLOW_CPU = Pace(step_s=0.1, evaluation_s=0.5, setup_s=2.0, device="cpu", steps_timed=10)


@pytest.fixture
def paced(monkeypatch):
    """Every measured pace is `SLOW_CPU` (no dataset is read), with no pace cached from another test."""
    measured = []
    monkeypatch.setattr(duration_page, "FIRST_WAIT_S", 60.0)  # the page waits for the timing: no poll to follow
    monkeypatch.setattr(duration_service, "measure_pace", lambda spec, **_: measured.append(spec) or SLOW_CPU)
    duration_service.pace_timing.clear()
    duration_service.history_pace.clear()
    yield measured
    duration_service.pace_timing.clear()
    duration_service.history_pace.clear()


def test_a_long_preset_is_flagged_and_its_short_variant_fits_a_demo(home, paced):
    at = open_app()
    at.selectbox(key="train_preset").set_value(OPACUS).run()
    assert not at.exception, at.exception
    assert metrics(at)["Steps"] == "3,750"
    [warning] = [w.value for w in at.warning if "Expected duration" in w.value]
    seconds = SLOW_CPU.seconds(3_750)
    assert seconds > LONG_ON_CPU_S and "about 7 min 10 s" in warning and "long for a live demo on a CPU" in warning
    assert "timed just now on the CPU" in warning
    sigma = float(metrics(at)["Noise multiplier σ"])

    at.button(key="train_short_variant").click().run()
    assert not at.exception, at.exception
    assert not [w for w in at.warning if "Expected duration" in w.value]
    [caption] = [c.value for c in at.caption if "Expected duration" in c.value]
    assert "about 1 min" in caption, caption
    steps = int(metrics(at)["Steps"].replace(",", ""))
    assert SLOW_CPU.seconds(steps) <= LONG_ON_CPU_S and steps < 3_750
    assert at.session_state["train_epochs"] < 15 and at.session_state["train_mode"] == "Target ε"
    assert float(metrics(at)["Noise multiplier σ"]) < sigma  # recalibrated for fewer steps at the same ε
    assert float(metrics(at)["ε after training (RDP)"]) <= at.session_state["train_target_epsilon"]
    [note] = [s.value for s in at.success if "Short variant" in s.value]
    assert "epochs" in note and "same target" in note


def test_a_finished_run_of_the_same_shape_sets_the_pace(home, store, paced):
    at = open_app()  # the digits demo, for one epoch
    at.number_input(key="train_epochs").set_value(1).run()
    [caption] = [c.value for c in at.caption if "Expected duration" in c.value]
    assert "timed just now" in caption and len(paced) == 1  # one timing for both epochs: the same shape
    at.button(key="train").click().run()
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    duration_service.history_pace.clear()  # read every 30 s: no wait here
    at.number_input(key="train_seed").set_value(7).run()  # another run of the same shape
    [caption] = [c.value for c in at.caption if "Expected duration" in c.value]
    assert "at the pace of a run of this shape that finished here on the " in caption, caption
