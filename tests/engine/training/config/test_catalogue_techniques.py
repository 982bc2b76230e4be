"""The catalogue lists the training techniques beside the algorithms, each with keys the spec knows and a source."""

from engine.training import describe_algorithms
from engine.training.config.keys import ALL_KEYS


def test_the_techniques_are_listed_with_their_keys_and_papers():
    techniques = {entry["name"]: entry for entry in describe_algorithms() if entry["kind"] == "technique"}
    assert set(techniques) == {"augmentation_multiplicity", "ema_decay", "fill_budget"}
    for entry in techniques.values():
        assert set(entry["keys"]) <= set(ALL_KEYS), entry
        assert entry["source"] and entry["description"]
    assert "De et al. 2022" in techniques["augmentation_multiplicity"]["source"]
    assert "free in ε" in techniques["ema_decay"]["description"]
