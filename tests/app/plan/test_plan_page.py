"""The Plan page under Streamlit's AppTest: its widgets and tooltips, defaults that plan without error, numbers that
follow the inputs (and equal the privacy layer's for the same inputs), and errors, not tracebacks, for bad input."""

import json
import math

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app.common import charts
from engine.privacy import ACCOUNTANTS, calibrate_noise_multiplier, dpsgd_step_event, panel, single_phase
from tests.apptest_helpers import error_text, metrics, open_page

DIGITS_N = 1438
WIDGETS = {  # key → AppTest accessor of the widgets shown by default
    "plan_dataset": "selectbox",
    "plan_lots": "radio",
    "plan_lot_size": "number_input",
    "plan_epochs": "slider",
    "plan_delta": "number_input",
    "plan_mode": "radio",
    "plan_target_epsilon": "select_slider",
}


def plan_with(at: AppTest, changes: list[tuple[str, str, object]], *, delta: float = 1e-5) -> AppTest:
    """Set several inputs (AppTest accessor, key, value) in order, and plan only the final combination: with δ = 0
    every run in between stops at that error at once (some inputs appear only after an earlier choice)."""
    at.number_input(key="plan_delta").set_value(0.0).run()
    for kind, key, value in changes:
        getattr(at, kind)(key=key).set_value(value).run()
    return at.number_input(key="plan_delta").set_value(delta).run()


def accountant_table(at: AppTest) -> dict[str, float]:
    table = next(d.value for d in at.dataframe if "accountant" in d.value)
    return dict(zip(table["accountant"], table["ε"], strict=True))


def test_widgets_have_tooltips_and_the_defaults_plan_without_error(home):
    at = open_page("plan")
    assert at.title[0].value == "Plan a private training run"
    for key, kind in WIDGETS.items():
        widget = getattr(at, kind)(key=key)
        assert widget.help and widget.help.strip().endswith("."), f"{key} needs a one-sentence tooltip"
    assert at.select_slider(key="plan_target_epsilon").options[0] == "0.1"
    assert at.select_slider(key="plan_target_epsilon").options[-1] == "10.0"
    assert not at.error and not at.warning
    shown = metrics(at)
    sigma = calibrate_noise_multiplier(target_epsilon=3.0, delta=1e-5, sampling_rate=64 / DIGITS_N, steps=450)
    assert shown["Noise multiplier σ"] == f"{sigma:.3f}"
    assert "calibrated by RDP" in next(m for m in at.metric if m.label == "Noise multiplier σ").proto.delta
    assert shown["Steps T"] == "450" and float(shown["ε by RDP"]) <= 3.0
    assert float(shown["ε, tightest bound"]) <= float(shown["ε by RDP"])
    assert all(m.help for m in at.metric)
    assert len(at.get("plotly_chart")) == 1
    assert any(m.value.startswith("- Trained with (") for m in at.markdown)  # the privacy statement


def test_moving_the_epsilon_slider_changes_sigma_and_never_trains(home, store):
    at = open_page("plan")
    before = float(metrics(at)["Noise multiplier σ"])
    at.select_slider(key="plan_target_epsilon").set_value(1.0).run()
    shown = metrics(at)
    assert float(shown["Noise multiplier σ"]) > before  # less ε needs more noise
    assert float(shown["ε by RDP"]) <= 1.0 and not at.error
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert any(a["text"] == "target ε = 1" for a in spec["layout"]["annotations"])
    assert store.list_runs() == []


def test_sigma_by_pld_is_labelled_and_the_headline_keeps_what_train_runs(home):
    at = open_page("plan")
    headline = metrics(at)["Noise multiplier σ"]
    assert at.toggle(key="plan_pld_sigma").help
    at.toggle(key="plan_pld_sigma").set_value(True).run()
    assert not error_text(at)
    common = dict(target_epsilon=3.0, delta=1e-5, sampling_rate=64 / DIGITS_N, steps=450)
    pld_sigma = calibrate_noise_multiplier(**common, accountant_name="pld")
    assert pld_sigma < calibrate_noise_multiplier(**common)
    assert any(f"By the tighter PLD accountant σ = **{pld_sigma:.3f}**" in i.value for i in at.info)
    assert metrics(at)["Noise multiplier σ"] == headline  # RDP's σ: what the Train page would run


def test_sigma_mode_shows_each_accountants_epsilon_as_the_privacy_panel_computes_it(home):
    changes = [("radio", "plan_mode", "Noise multiplier σ"), ("number_input", "plan_sigma", 2.0)]
    at = plan_with(open_page("plan"), changes)
    assert at.number_input(key="plan_sigma").help
    assert not error_text(at)
    shown, table = metrics(at), accountant_table(at)
    assert shown["Noise multiplier σ"] == "2.000" and shown["Steps T"] == "450"

    ledger = single_phase(dpsgd_step_event(sampling_rate=64 / DIGITS_N, noise_multiplier=2.0), 450)
    expected = panel(ledger, delta=1e-5)
    assert shown["ε by RDP"] == f"{expected.final()['rdp']:.3f}"
    assert len(table) == len(expected.curves) >= 4
    for name, epsilon in expected.final().items():
        assert table[ACCOUNTANTS[name].title] == pytest.approx(epsilon, rel=1e-9), name
    tightest, epsilon = expected.tightest()
    assert shown["ε, tightest bound"] == f"{epsilon:.3f}"
    assert f"by {ACCOUNTANTS[tightest].label}" in next(m for m in at.metric if "tightest" in m.label).proto.delta
    for name in expected.not_applicable:  # zCDP: no amplification by subsampling
        assert any(ACCOUNTANTS[name].title in c.value and "Not applicable" in c.value for c in at.caption)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    legend = [trace["name"] for trace in spec["data"]]
    assert sorted(legend) == sorted(
        f"{ACCOUNTANTS[name].label}: ε = {eps:.3g}" + (" (tightest)" if name == tightest else "")
        for name, eps in expected.final().items()
    )
    assert not spec["layout"].get("annotations")  # no target line without a target


def test_delta_at_least_one_over_n_and_a_large_epsilon_warn(home):
    changes = [
        ("selectbox", "plan_dataset", "custom"),
        ("number_input", "plan_n", 100),
        ("number_input", "plan_lot_size", 100),
        ("slider", "plan_epochs", 100),
        ("radio", "plan_mode", "Noise multiplier σ"),
        ("number_input", "plan_sigma", 2.0),
    ]
    at = plan_with(open_page("plan"), changes, delta=0.01)  # q = 1, T = 100, σ = 2, δ = 1/N
    assert not error_text(at)
    assert float(metrics(at)["ε, tightest bound"]) > 10
    warnings = " ".join(w.value for w in at.warning)
    assert "δ = 0.01 ≥ 1/N = 0.01" in warnings and "is above 10" in warnings
    assert any("WARNING, δ ≥ 1/N" in m.value for m in at.markdown)  # the privacy statement says so too


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("plan_lot_size", 5000, "lot size L = 5,000 must lie in [1, N = 1,438]"),
        ("plan_delta", 1.0, "δ must lie strictly between 0 and 1"),
        ("plan_delta", 0.0, "δ must lie strictly between 0 and 1"),
    ],
)
def test_invalid_input_shows_an_error_not_a_traceback(home, key, value, message):
    at = open_page("plan")
    at.number_input(key=key).set_value(value).run()
    assert message in error_text(at)
    assert not at.get("plotly_chart") and not at.metric


def test_sampling_rate_input_plans_as_the_same_lot_size(home):
    at = open_page("plan")
    by_lot_size = metrics(at)
    at = plan_with(at, [("radio", "plan_lots", "Sampling rate q"), ("number_input", "plan_q", 1.5)])
    assert at.number_input(key="plan_q").help
    assert "sampling rate q must lie in (0, 1]" in error_text(at)
    at.number_input(key="plan_q").set_value(64 / DIGITS_N).run()
    assert not error_text(at)
    assert metrics(at) == by_lot_size
    assert any("expected lot size 64 of N = 1,438" in m.value for m in at.markdown)


def test_an_unreachable_target_is_an_error(home):
    changes = [
        ("selectbox", "plan_dataset", "custom"),
        ("number_input", "plan_n", 100),
        ("number_input", "plan_lot_size", 100),
        ("slider", "plan_epochs", 100),
        ("select_slider", "plan_target_epsilon", 0.1),
    ]
    at = plan_with(open_page("plan"), changes, delta=1e-100)  # q = 1: no amplification; even σ = 500 is not enough
    assert "target_epsilon=0.1 is unreachable" in error_text(at)
    assert not at.get("plotly_chart")


def test_plan_figure_has_a_line_per_accountant_and_the_target_on_the_log_axis():
    steps = np.array([1, 50, 100])
    frame = np.concatenate(
        [[(name, s * 0.01, e) for s, e in zip(steps, [0.1, 1.0, 2.0], strict=True)] for name in ("rdp", "pld", "naive")]
    )
    import pandas as pd

    data = pd.DataFrame(frame, columns=["accountant", "epochs", "epsilon"]).astype({"epochs": float, "epsilon": float})
    fig = charts.plan_epsilon_figure(data, target_epsilon=3.0, tightest="pld")
    assert [t.name.split(":")[0] for t in fig.data] == ["RDP", "PLD", "naive composition"]
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.annotations[0].y == pytest.approx(math.log10(3.0))  # annotations on a log axis take log10
    assert "(tightest)" in fig.data[1].name
    linear = charts.plan_epsilon_figure(data, target_epsilon=3.0, log_y=False)
    assert linear.layout.annotations[0].y == 3.0 and linear.layout.yaxis.type is None
