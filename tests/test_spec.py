"""Specs: bad input is refused with a message naming the key and the allowed range."""

import pytest

from engine import ENGINE_VERSION
from engine.training import SpecError, parse_spec
from tests.conftest import fast_spec


def test_the_acceptance_spec_is_valid():
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
