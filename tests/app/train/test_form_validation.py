"""The Train and Sweep forms under AppTest run the engine's own validation before Train / Launch: the default
audit fits the chosen model (gradient canaries take one trainable coordinate each), and a spec no worker can train
disables the button with the engine's reason shown beside it."""

import pytest

from app.common.safe_text import unescape
from app.train import spec_form
from engine.training import parse_spec
from tests.apptest_helpers import open_app, open_page, train_form_spec

STEEP_SIGMA = {"kind": "step", "factor": 0.001, "every_epochs": 0.01}  # σ × 1e-12 from the second step


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def test_the_default_preset_with_the_audit_ticked_trains(home, store):
    at = open_app()
    at.checkbox(key="train_audit").check().run()
    assert not at.exception, at.exception
    assert at.number_input(key="train_audit_canaries").value == 650  # digits logreg: 64 × 10 + 10 coordinates
    assert not at.error and not at.button(key="train").disabled
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["audit"] == {"canaries": 650, "kind": "gradient"}
    parse_spec(run.spec)  # what the worker parses: accepted


def test_canaries_the_model_cannot_take_disable_train_with_the_reason(home, store):
    at = open_app()
    at.checkbox(key="train_audit").check().run()
    at.number_input(key="train_audit_canaries").set_value(5000).run()
    assert at.number_input(key="train_audit_canaries").value == 5000, "a typed count is kept as typed"
    reason = "audit: canaries must be an integer in [10, 650]"
    assert any(reason in unescape(e.value) for e in at.error), [e.value for e in at.error]
    train = at.button(key="train")
    assert train.disabled and reason in unescape(train.help)
    assert store.list_runs() == []


def test_a_schedule_driving_sigma_out_of_range_disables_train_with_the_reason(home, store, monkeypatch):
    form = spec_form.spec_form
    monkeypatch.setattr(spec_form, "spec_form", lambda: form() | {"noise_schedule": STEEP_SIGMA})
    at = open_app()
    reason = "noise_schedule: multiplies σ by 1e-12 at epoch 0.04451 (step 2 of 450)"
    assert any(reason in unescape(e.value) for e in at.error), [e.value for e in at.error]
    train = at.button(key="train")
    assert train.disabled and reason in unescape(train.help)
    assert "noise_schedule" not in train_form_spec(at)  # the form itself never offers one
    assert store.list_runs() == []


def test_the_sweep_audit_fits_the_base_model_and_each_point_is_checked(home, store):
    at = open_page("sweep")
    at.checkbox(key="sweep_base_audit").check().run()
    assert at.number_input(key="sweep_base_audit_canaries").value == 650
    assert not at.error and not at.button(key="sweep_launch").disabled
    at.number_input(key="sweep_base_audit_canaries").set_value(5000).run()
    reason = "audit: canaries must be an integer in [10, 650]"
    assert any(reason in unescape(e.value) for e in at.error), [e.value for e in at.error]
    assert at.button(key="sweep_launch").disabled
    assert store.list_runs() == []
