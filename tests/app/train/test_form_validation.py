"""The Train and Sweep forms under AppTest run the engine's own validation before Train / Launch: the default
audit fits the chosen model (gradient canaries take one trainable coordinate each), and a spec no worker can train
disables the button with the engine's reason shown beside it."""

import pytest

from app.common.safe_text import unescape
from app.train import train_form
from engine.training import parse_spec
from tests.apptest_helpers import metrics, open_app, open_page, train_form_spec

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
    form = train_form.spec_form
    monkeypatch.setattr(train_form, "spec_form", lambda: form() | {"noise_schedule": STEEP_SIGMA})
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


def sidebar_in_order(at) -> list:
    """The sidebar's elements in the order they are drawn (containers walked through)."""
    from streamlit.testing.v1.element_tree import Block

    def walk(node):
        if isinstance(node, Block):
            for index in sorted(node.children):
                yield from walk(node.children[index])
        else:
            yield node

    return list(walk(at.sidebar))


def reason_under(at, key: str) -> str:
    """The error drawn right under the sidebar widget `key` (its text as it reads), or "" when none is."""
    shown = sidebar_in_order(at)
    [where] = [i for i, element in enumerate(shown) if getattr(element, "key", None) == key]
    below = shown[where + 1] if where + 1 < len(shown) else None
    return unescape(below.value) if below is not None and below.type == "error" else ""


def test_an_epsilon_or_delta_out_of_range_is_used_and_refused_under_its_field(home, store):
    at = open_app()
    at.number_input(key="train_target_epsilon").set_value(500.0).run()
    assert at.session_state["train_target_epsilon"] == 500.0, "the typed value, not an older or clamped one"
    assert train_form_spec(at)["target_epsilon"] == 500.0
    reason = reason_under(at, "train_target_epsilon")
    assert "Target ε" in reason and "must be a number in [0.01, 100], got 500" in reason, reason
    assert at.button(key="train").disabled
    assert "ε after training (RDP)" not in metrics(at), "no summary of another configuration"

    at.number_input(key="train_target_epsilon").set_value(3.0).run()
    at.number_input(key="train_delta").set_value(0.5).run()
    assert train_form_spec(at)["delta"] == 0.5
    reason = reason_under(at, "train_delta")
    assert "δ" in reason and "must be a number in (0, 0.1], got 0.5" in reason, reason
    assert reason_under(at, "train_target_epsilon") == ""
    assert at.button(key="train").disabled and "ε after training (RDP)" not in metrics(at)

    at.number_input(key="train_delta").set_value(1e-5).run()
    assert not at.button(key="train").disabled and reason_under(at, "train_delta") == ""
    assert float(metrics(at)["ε after training (RDP)"]) <= 3.0


def test_canaries_the_model_cannot_take_are_refused_under_their_field(home, store):
    at = open_app()
    at.checkbox(key="train_audit").check().run()
    at.number_input(key="train_audit_canaries").set_value(5000).run()
    reason = reason_under(at, "train_audit_canaries")
    assert "Canaries m" in reason and "must be an integer in [10, 650] for this model" in reason, reason
    assert at.button(key="train").disabled


def test_the_canary_count_follows_the_chosen_model_until_typed(home, store):
    at = open_app()
    at.checkbox(key="train_audit").check().run()
    assert at.number_input(key="train_audit_canaries").value == 650  # logistic regression: 650 coordinates
    at.selectbox(key="train_model").set_value("mlp").run()
    assert at.number_input(key="train_audit_canaries").value == 1000  # 9,610 coordinates: the full default
    at.selectbox(key="train_model").set_value("logreg").run()
    assert at.number_input(key="train_audit_canaries").value == 650
    assert not at.button(key="train").disabled
    at.checkbox(key="train_use_pca").check().run()  # 60 dimensions: 61 × 10 coordinates
    assert at.number_input(key="train_audit_canaries").value == 610
    assert not at.button(key="train").disabled
    at.number_input(key="train_audit_canaries").set_value(300).run()
    at.selectbox(key="train_model").set_value("mlp").run()
    assert at.number_input(key="train_audit_canaries").value == 300, "a count typed by hand is kept"
