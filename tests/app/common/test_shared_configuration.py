"""One configuration shared by the Plan, Train and Sweep forms: a value changed on one page is the value the others
start from (each where its widgets can show it), and the Plan's and Sweep's σ modes start from the σ calibrated for
their target."""

import math
from types import SimpleNamespace

import pytest
import streamlit as st

from app import services
from tests.apptest_helpers import metrics, open_app


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def shown(at, keys: dict[str, str]) -> dict[str, object]:
    """The values of the sidebar widgets `keys` (name → widget key) as the page shows them."""
    return {name: at.session_state[key] for name, key in keys.items()}


PLAN = {"epochs": "plan_epochs", "ε": "plan_target_epsilon", "δ": "plan_delta", "L": "plan_lot_size"}
TRAIN = {"epochs": "train_epochs", "ε": "train_target_epsilon", "δ": "train_delta", "L": "train_lot_size"}
SWEEP = {"epochs": "sweep_base_epochs", "ε": "sweep_base_target_epsilon", "δ": "sweep_base_delta"}
SWEEP |= {"L": "sweep_base_lot_size"}


def test_plan_train_and_sweep_start_from_the_configuration_changed_on_any_of_them(home, monkeypatch):
    # the forms are under test: the Plan and Sweep pages stop after them instead of accounting each plan (seconds)
    monkeypatch.setattr(services, "privacy_plan", lambda settings: SimpleNamespace(error="not planned here"))
    monkeypatch.setattr(services, "preview_sweep", lambda spec: SimpleNamespace(error="not previewed here"))
    at = open_app()
    at.switch_page("views/plan.py").run()
    at.slider(key="plan_epochs").set_value(30)
    at.select_slider(key="plan_target_epsilon").set_value(1.5)
    at.number_input(key="plan_delta").set_value(1e-6)
    at.number_input(key="plan_lot_size").set_value(128).run()  # one run for all four: each plan takes seconds
    planned = {"epochs": 30, "ε": 1.5, "δ": 1e-6, "L": 128}

    at.switch_page("views/train.py").run()
    assert not at.exception, at.exception
    assert shown(at, TRAIN) == planned
    assert at.radio(key="train_mode").value == "Target ε"
    assert "The configuration shared by the Plan page." in [c.value for c in at.sidebar.caption]
    at.number_input(key="train_clip_norm").set_value(2.0)
    at.number_input(key="train_lr").set_value(0.5)
    at.selectbox(key="train_model").set_value("mlp")
    at.number_input(key="train_target_epsilon").set_value(0.8).run()  # between the Plan slider's stops

    at.switch_page("views/sweep.py").run()
    assert not at.exception, at.exception
    assert shown(at, SWEEP) == planned | {"ε": 0.8}
    assert at.selectbox(key="sweep_base_model").value == "mlp"
    assert at.number_input(key="sweep_base_clip_norm").value == 2.0
    assert at.number_input(key="sweep_base_lr").value == 0.5
    at.radio(key="sweep_base_privacy_by").set_value("noise_multiplier").run()
    at.number_input(key="sweep_base_noise_multiplier").set_value(2.5).run()

    at.switch_page("views/plan.py").run()
    assert not at.exception, at.exception
    assert at.radio(key="plan_mode").value == "Noise multiplier σ" and at.number_input(key="plan_sigma").value == 2.5
    assert at.session_state["plan_target_epsilon"] == 0.8  # its slider gets a stop at Train's 0.8
    at.switch_page("views/train.py").run()
    assert at.radio(key="train_mode").value == "Noise multiplier σ"
    assert at.number_input(key="train_noise_multiplier").value == 2.5
    assert shown(at, TRAIN) == planned | {"ε": 0.8} and at.selectbox(key="train_model").value == "mlp"


def test_the_plan_sigma_mode_starts_from_the_calibrated_sigma(home, monkeypatch):
    monkeypatch.setattr(services, "plan_panel", lambda plan: st.stop())  # σ, T, q and ε by RDP are enough here
    at = open_app()
    at.switch_page("views/plan.py").run()
    calibrated = float(metrics(at)["Noise multiplier σ"])
    at.radio(key="plan_mode").set_value("Noise multiplier σ").run()
    assert not at.exception, at.exception
    sigma = at.number_input(key="plan_sigma").value
    assert sigma == math.ceil(calibrated * 1000) / 1000 or sigma == pytest.approx(calibrated, abs=1e-3)
    assert sigma >= calibrated and float(metrics(at)["ε by RDP"]) <= 3.0


def test_the_sweep_sigma_mode_starts_from_the_sigma_calibrated_for_its_base(home, monkeypatch):
    monkeypatch.setattr(services, "preview_sweep", lambda spec: SimpleNamespace(error="not previewed here"))
    at = open_app()
    calibrated = float(metrics(at)["Noise multiplier σ"])  # the Train page's base: 1.649 for ε = 3
    at.switch_page("views/sweep.py").run()
    at.radio(key="sweep_base_privacy_by").set_value("noise_multiplier").run()
    assert not at.exception, at.exception
    sigma = at.number_input(key="sweep_base_noise_multiplier").value
    assert sigma == pytest.approx(calibrated, abs=1e-3) and sigma >= calibrated
