"""Specs: bad input is refused with a message naming the key and the allowed range."""

import pytest

from engine import ENGINE_VERSION
from engine.training import SpecError, parse_spec
from tests.helpers import fast_spec


def test_the_digits_demo_spec_is_valid():
    spec = parse_spec(fast_spec())
    assert spec.target_epsilon == 3.0 and spec.noise_multiplier is None and spec.hidden == ()
    assert parse_spec(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"colour": "red"}, "colour", "unknown key"),
        ({"lot_size": 0}, "lot_size", "[1, "),
        ({"lot_size": 64.5}, "lot_size", "an integer"),
        ({"lot_size": True}, "lot_size", "an integer"),
        ({"lot_size": 5000}, "lot_size", "[1, 1438]"),
        ({"delta": 0.0}, "delta", "(0, 0.1]"),
        ({"delta": 1e-3}, "delta", "1/N"),
        ({"clip_norm": -1}, "clip_norm", "(0, 1000]"),
        ({"epochs": float("nan")}, "epochs", "(0, 1000]"),
        ({"lr": "fast"}, "lr", "a number"),
        ({"target_epsilon": 500}, "target_epsilon", "[0.01, 100]"),
        ({"noise_multiplier": 1.0}, "target_epsilon", "exactly one"),
        ({"dataset": "cifar100"}, "dataset", "digits, adult"),
        ({"model": "resnet"}, "model", "logreg, mlp, cnn"),
        ({"algorithm": "sgd"}, "algorithm", "dpsgd, noisy_gd, nonprivate"),
        ({"hidden": [64]}, "hidden", "only applies"),
    ],
)
def test_bad_values_name_the_field_and_range(change, field, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec(fast_spec(**change))
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert fragment in str(info.value)


def test_missing_keys_are_named():
    raw = fast_spec()
    del raw["clip_norm"]
    with pytest.raises(SpecError, match="clip_norm: missing required key"):
        parse_spec(raw)
    raw = fast_spec()
    del raw["target_epsilon"]
    with pytest.raises(SpecError, match="exactly one of target_epsilon and noise_multiplier"):
        parse_spec(raw)


def test_mlp_widths_are_validated():
    assert parse_spec(fast_spec(model="mlp")).hidden == (128,)
    assert parse_spec(fast_spec(model="mlp", hidden=[64, 32])).hidden == (64, 32)
    with pytest.raises(SpecError, match="hidden"):
        parse_spec(fast_spec(model="mlp", hidden=[0]))
    with pytest.raises(SpecError, match="hidden"):
        parse_spec(fast_spec(model="mlp", hidden=[8] * 9))


def test_cache_key_depends_on_spec_and_engine_version_only():
    a, b = parse_spec(fast_spec()), parse_spec(dict(reversed(list(fast_spec().items()))))
    assert a.cache_key(ENGINE_VERSION) == b.cache_key(ENGINE_VERSION)
    assert a.cache_key(ENGINE_VERSION) != a.cache_key(ENGINE_VERSION + "+1")
    assert a.cache_key(ENGINE_VERSION) != parse_spec(fast_spec(seed=1)).cache_key(ENGINE_VERSION)


LEARNER = {"dataset": "adult", "algorithm": "expmech_stumps", "seed": 0, "delta": 1e-6, "target_epsilon": 1.0}


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"dataset": "digits"}, "dataset", "learns two classes; digits has 10"),
        ({"noise_multiplier": 1.0}, "noise_multiplier", "does not apply to algorithm 'expmech_stumps'"),
        ({"model": "mlp"}, "model", "must be one of stumps"),
        ({"lot_size": 64}, "lot_size", "does not apply to algorithm 'expmech_stumps'"),
        ({"thresholds": 1}, "thresholds", "[2, 256]"),
        ({"delta": 1e-3}, "delta", "must be < 1/N"),
        ({"algorithm": "rwm_online", "rounds": 10**6}, "rounds", "each example is used once"),
        ({"algorithm": "sq_laplace", "epochs": 2.5, "lr": 1.0}, "epochs", "whole iterations"),
        ({"algorithm": "sq_laplace"}, "epochs", "missing required key"),
        ({"algorithm": "aniso_dpsgd"}, "model", "missing required key"),
    ],
)
def test_learner_and_aniso_specs_name_the_field(change, field, fragment):
    with pytest.raises(SpecError) as caught:
        parse_spec({k: v for k, v in (LEARNER | change).items() if v is not None})
    assert caught.value.field == field and fragment in str(caught.value), str(caught.value)


def test_learner_specs_fill_their_defaults_and_round_trip():
    for algorithm, extra in [
        ("expmech_stumps", {}),
        ("sq_laplace", {"epochs": 10, "lr": 2.0}),
        ("rwm_online", {}),
        ("rwm_linear", {"rounds": 500}),
    ]:
        canonical = parse_spec(LEARNER | {"algorithm": algorithm} | extra).to_dict()
        assert parse_spec(canonical).to_dict() == canonical
        assert not {"lot_size", "clip_norm", "optimizer", "features", "lr_schedule"} & set(canonical)
    assert parse_spec(LEARNER | {"algorithm": "rwm_online"}).rounds == 32_561  # every training example once
    aniso = parse_spec(fast_spec(algorithm="aniso_dpsgd")).to_dict()
    assert (aniso["aniso_granularity"], aniso["aniso_smoothing"], aniso["aniso_max_ratio"]) == ("layer", 0.9, 10.0)
    assert "clipping" not in aniso and parse_spec(aniso).to_dict() == aniso
