"""The one home of metric names: every accountant's ε metric parses back to its accountant, every metric the trainer
records is either released or a private diagnostic, and the module imports nothing of the lab's."""

import ast
import dataclasses
from pathlib import Path

import pytest

from engine import metric_names
from engine.metric_names import (
    EPSILON,
    PRIVATE_DIAGNOSTICS,
    RELEASED_METRICS,
    STREAMED_ACCOUNTANT,
    accountant_of,
    epsilon_metric,
    is_released_metric,
)
from engine.privacy import ACCOUNTANTS
from engine.privacy.accountants import Accountant, registered_accountant
from engine.privacy.errors import PrivacyError
from engine.training import StepRecord


def test_every_accountants_metric_parses_back():
    assert STREAMED_ACCOUNTANT in ACCOUNTANTS and accountant_of(EPSILON) == STREAMED_ACCOUNTANT
    for name in ACCOUNTANTS:
        assert accountant_of(epsilon_metric(name)) == name and is_released_metric(epsilon_metric(name))
    assert accountant_of("epsilon_") is None and accountant_of("train_loss") is None
    assert not is_released_metric("epsilon_") and not is_released_metric("a_new_metric")


def test_every_step_metric_is_released_or_private():
    recorded = {f.name for f in dataclasses.fields(StepRecord)} - {"step"}
    assert recorded == RELEASED_METRICS | PRIVATE_DIAGNOSTICS and not RELEASED_METRICS & PRIVATE_DIAGNOSTICS


def test_the_names_module_imports_only_the_standard_library():
    tree = ast.parse(Path(metric_names.__file__).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_an_accountant_name_is_registered_once():
    twin = dataclasses.replace(ACCOUNTANTS["rdp"], label="twin")
    with pytest.raises(PrivacyError, match="already registered"), registered_accountant(twin):
        pass
    assert isinstance(ACCOUNTANTS["rdp"], Accountant) and ACCOUNTANTS["rdp"].label == "RDP", "the first one kept"
