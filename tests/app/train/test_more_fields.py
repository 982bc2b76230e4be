"""The Train form's Advanced fields under AppTest: the one-run audit option (DP-SGD only) goes into the spec, the
run it launches is audited, and a spec with an audit fills the form back."""

import pytest

from app.train.presets import PresetError, form_values
from app.train.widget_spec import raw_spec
from engine.training import parse_spec
from tests.apptest_helpers import open_app, train_form_spec
from tests.helpers import fast_spec


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def test_the_audit_option_goes_into_the_spec_and_the_run(home, store):
    at = open_app()
    box = at.checkbox(key="train_audit")
    assert box.label == "Audit ε with canaries" and "lower bound" in box.help and "never changes ε" in box.help
    assert "audit" not in train_form_spec(at)
    assert "train_audit_canaries" not in {w.key for w in at.number_input}
    box.check().run()
    canaries = at.number_input(key="train_audit_canaries")
    assert canaries.value == 650  # min(1,000, the trainable coordinates of digits logreg)
    assert "ceiling" in canaries.help and "[10, 100,000]" in canaries.help
    kind = at.radio(key="train_audit_kind")
    assert kind.value == "gradient" and "white-box" in kind.help
    canaries.set_value(200).run()
    at.radio(key="train_audit_kind").set_value("input").run()
    assert train_form_spec(at)["audit"] == {"canaries": 200, "kind": "input"}
    parse_spec(train_form_spec(at) | {"epochs": 1})  # a spec the engine accepts
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["audit"] == {"canaries": 200, "kind": "input"}


@pytest.mark.parametrize("algorithm", ["noisy_gd", "nonprivate", "aniso_dpsgd"])
def test_only_dpsgd_offers_an_audit(home, algorithm):
    at = open_app()
    at.checkbox(key="train_audit").check().run()
    at.selectbox(key="train_algorithm").set_value(algorithm).run()
    assert not at.exception, at.exception
    assert "train_audit" not in {w.key for w in at.checkbox}
    assert "audit" not in train_form_spec(at), "a checked box left behind must not audit another algorithm"


def test_a_spec_with_an_audit_fills_the_form_back():
    spec = fast_spec(audit={"canaries": 500, "kind": "gradient"})
    values = form_values(spec)
    assert (values["audit"], values["audit_canaries"], values["audit_kind"]) == (True, 500, "gradient")
    assert raw_spec(values)["audit"] == {"canaries": 500, "kind": "gradient"}
    assert form_values(fast_spec())["audit"] is False


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"lr_schedule": {}}, "lr_schedule"),
        ({"lr_schedule": "linear"}, "lr_schedule"),
        ({"lr_schedule": {"kind": "linear", "end_factor": "x", "epochs": 2}}, "lr_schedule"),
        ({"audit": {"canaries": "many", "kind": "gradient"}}, "audit"),
        ({"audit": {"canaries": 100, "kind": "sideways"}}, "audit"),
        ({"audit": []}, "audit"),
    ],
)
def test_a_spec_the_form_cannot_show_is_refused_by_name(change, field):
    """An imported record can hold anything: the form names what it cannot show instead of failing."""
    with pytest.raises(PresetError, match=f"^{field}: "):
        form_values(fast_spec() | change)
