"""A run's short label: each spec value as it reads, whole numbers in full (a search's seeds have ten digits)."""

import pytest

from app.common.labels import spec_part


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("seed", 811929419, "seed 811929419"),
        ("lot_size", 64, "L 64"),
        ("target_epsilon", 3.0, "ε 3"),
        ("lr", 0.05, "lr 0.05"),
        ("epochs", 2.5, "2.5 ep"),
        ("noise", "release", "noise release"),
    ],
)
def test_spec_values_read_as_written(key, value, text):
    assert spec_part(key, value) == text
