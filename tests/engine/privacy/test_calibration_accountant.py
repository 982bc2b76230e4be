"""σ calibrated by the accountant the spec names: RDP (the default, instant) or PLD (the tightest, which spends the
target). The spec, the plan, the Train page and the stored plan all say which one calibrated σ."""

import pytest
from streamlit.testing.v1 import AppTest

from engine.jobs.workers.worker import Worker
from engine.privacy import final_epsilon
from engine.training import SpecError, parse_spec, plan_spec
from tests.apptest_helpers import MAIN
from tests.helpers import fast_spec


def test_a_target_spec_names_its_calibration_accountant_and_rdp_is_the_default():
    assert parse_spec(fast_spec()).to_dict()["calibration_accountant"] == "rdp"
    assert parse_spec(fast_spec(calibration_accountant="pld")).calibration_accountant == "pld"
    given_sigma = parse_spec(
        {k: v for k, v in fast_spec(target_epsilon=None, noise_multiplier=1.0).items() if v is not None}
    )
    assert "calibration_accountant" not in given_sigma.to_dict()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"calibration_accountant": "zcdp"}, "calibration_accountant"),
        ({"calibration_accountant": "pld", "target_epsilon": None, "noise_multiplier": 1.0}, "only applies with"),
    ],
)
def test_a_bad_calibration_accountant_is_a_named_error(changes, message):
    spec = {k: v for k, v in fast_spec(**changes).items() if v is not None}
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert caught.value.field == "calibration_accountant" and message in str(caught.value)


@pytest.mark.parametrize("target", [1.0, 3.0])
def test_pld_calibration_spends_the_target_with_less_noise_than_rdp(target):
    """By PLD the run's ε meets the target and spends it (within the calibration's relative σ tolerance 1e-4,
    which moves ε by far less than 1%); RDP's σ is larger and leaves PLD's ε below the target."""
    by_rdp = plan_spec(parse_spec(fast_spec(target_epsilon=target)))
    by_pld = plan_spec(parse_spec(fast_spec(target_epsilon=target, calibration_accountant="pld")))
    assert (by_rdp.calibrated_by, by_pld.calibrated_by) == ("rdp", "pld")
    assert by_pld.noise_multiplier < by_rdp.noise_multiplier
    spent = final_epsilon(by_pld.ledger(), delta=by_pld.delta, accountant_name="pld")
    assert 0.99 * target <= spent <= target
    assert final_epsilon(by_rdp.ledger(), delta=by_rdp.delta, accountant_name="pld") < 0.99 * target
    assert by_pld.summary()["calibrated_by"] == "pld"


def test_the_train_page_calibrates_by_the_accountant_chosen_and_says_so(store):
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    sigma = next(m for m in at.metric if m.label == "Noise multiplier σ")
    assert str(sigma.proto.delta) == "by RDP"
    at.radio(key="train_calibration_accountant").set_value("pld").run()
    assert not at.exception, at.exception
    shown = {m.label: m for m in at.metric}
    assert str(shown["Noise multiplier σ"].proto.delta) == "by PLD"
    assert "ε after training (PLD)" in shown
    assert float(shown["ε after training (PLD)"].value) <= 3.0
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    (run,) = store.list_runs()
    assert run.spec["calibration_accountant"] == "pld"
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    run = store.get_run(run.id)
    assert run.plan["calibrated_by"] == "pld" and run.result["epsilons"]["pld"] <= 3.0
    at.run()
    assert not at.exception, at.exception
    # the form's preview and the run panel, which reads the stored plan
    assert [str(m.proto.delta) for m in at.metric if m.label == "Noise multiplier σ"] == ["by PLD", "by PLD"]
