"""Where the Train form's fields start: choosing the current preset again restores it after edits, and leaving the
target ε for a fixed σ starts σ at the one calibrated for that target (not at an unrelated default)."""

import pytest

from app.train.presets import PRESETS
from tests.apptest_helpers import metrics, open_app

MLP = next(name for name in PRESETS if name.startswith("Digits MLP"))


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def test_choosing_the_current_preset_again_restores_its_values(home):
    at = open_app()
    at.selectbox(key="train_preset").set_value(MLP).run()
    at.number_input(key="train_lr").set_value(0.3).run()
    at.selectbox(key="train_model").set_value("logreg").run()
    assert "Changed from this preset" in " ".join(c.value for c in at.sidebar.caption)
    at.selectbox(key="train_preset").set_value(MLP).run()
    assert not at.exception, at.exception
    assert at.session_state["train_lr"] == 1.0 and at.session_state["train_model"] == "mlp"
    assert at.selectbox(key="train_preset").value == MLP
    assert PRESETS[MLP].source in [c.value for c in at.sidebar.caption]


@pytest.mark.parametrize("mode", ["Noise multiplier σ", "Fill ε with σ"])
def test_sigma_starts_from_the_sigma_calibrated_for_the_target(home, mode):
    at = open_app()
    calibrated = float(metrics(at)["Noise multiplier σ"])  # 1.649 for ε = 3 on the digits demo
    assert calibrated > 1.2
    at.radio(key="train_mode").set_value(mode).run()
    assert not at.exception, at.exception
    sigma = at.number_input(key="train_noise_multiplier").value
    assert sigma == pytest.approx(calibrated, abs=1e-3) and sigma >= calibrated  # rounded up: ε stays ≤ the target
    if mode == "Noise multiplier σ":
        assert float(metrics(at)["ε after training (RDP)"]) <= 3.0
    at.number_input(key="train_noise_multiplier").set_value(2.5).run()
    other = "Fill ε with σ" if mode == "Noise multiplier σ" else "Noise multiplier σ"
    at.radio(key="train_mode").set_value(other).run()
    assert at.number_input(key="train_noise_multiplier").value == 2.5, "σ typed in a σ mode is kept"
