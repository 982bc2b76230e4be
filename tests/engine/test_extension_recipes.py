"""The contributor recipes, followed exactly: a new accountant, model and page each added by the route the guide gives
(an accountant and a model register themselves with the engine's registry; a page is its script, its package and one
entry in `app/pages.py`), and each then shows wherever the lab lists its kind, with no second table to edit. The
accountant and model are registered for one test and removed after it, so no other test sees them; the page is
added to a copy of `app/`, never to the repository."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch
from torch import nn

from app.common.charts import epsilon_figure, plan_epsilon_figure
from app.common.charts.accountants import ACCOUNTANT_PALETTE, DEFAULT_DASH
from app.train.widget_spec import models_for
from engine.cli import main as cli
from engine.jobs.recording import background_accountants
from engine.privacy import ACCOUNTANTS, dpsgd_step_event, panel, single_phase
from engine.privacy.accountants import Accountant, composition, registered_accountant
from engine.training import DATASETS, parse_spec
from engine.training.models.architectures import build_model
from engine.training.models.registry import MODELS, ModelEntry, registered_model
from tests.apptest_helpers import open_app
from tests.helpers import ROOT, fast_spec


def doubled_naive_curve(ledger, *, delta, steps=None):
    """A valid, loose bound: twice naive composition's."""
    curve = composition.naive_curve(ledger, delta=delta, steps=steps)
    return type(curve)(accountant="doubled", delta=delta, steps=curve.steps, epsilons=2 * curve.epsilons)


# What a contributor's accountant module holds (and registers on import: here, the fixture does it).
DOUBLED = Accountant(
    name="doubled",
    label="doubled naive",
    title="Doubled naive composition",
    citation="a throwaway accountant of the recipe test",
    curve=doubled_naive_curve,
    live=True,
)


def build_bag(*, n_features: int, n_classes: int, **_) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_features, n_classes), nn.Identity())


# What a contributor's model module holds.
BAG = ModelEntry(
    name="bag",
    title="Throwaway bag model",
    description="One linear layer and an identity: the recipe test's throwaway model.",
    builder=build_bag,
)


@pytest.fixture
def doubled():
    with registered_accountant(DOUBLED) as entry:
        yield entry
    assert "doubled" not in ACCOUNTANTS


@pytest.fixture
def bag():
    with registered_model(BAG) as entry:
        yield entry
    assert "bag" not in MODELS


def listing(capsys, *argv: str) -> str:
    assert cli(list(argv)) == 0
    return capsys.readouterr().out


def test_a_registered_accountant_is_listed_computed_and_drawn(doubled, capsys):
    plain = listing(capsys, "accountants")
    assert "\ndoubled " in plain and "Doubled naive composition" in plain
    assert {"name": "doubled", "label": "doubled naive"}.items() <= json.loads(
        listing(capsys, "accountants", "--json")
    )[-1].items()

    ledger = single_phase(dpsgd_step_event(sampling_rate=1.0, noise_multiplier=4.0), 5)
    accounts = panel(ledger, delta=1e-5)
    assert accounts.final()["doubled"] == pytest.approx(2 * accounts.final()["naive"])
    assert "doubled" in background_accountants()[0], "the recorder computes a live accountant beside the run"

    run = pd.DataFrame({"step": [1, 2], "epsilon": [0.5, 0.9], "epsilon_doubled": [3.0, 6.0]})
    [streamed, new] = epsilon_figure(run).data
    assert streamed.name == "RDP (every step): ε = 0.9"
    assert new.name == "doubled naive: ε = 6" and new.line.dash == DEFAULT_DASH
    assert new.line.color == ACCOUNTANT_PALETTE[(len(ACCOUNTANTS) - 1) % len(ACCOUNTANT_PALETTE)], "the palette again"
    plan = pd.DataFrame({"accountant": ["doubled", "doubled"], "epochs": [1.0, 2.0], "epsilon": [3.0, 6.0]})
    assert [t.name for t in plan_epsilon_figure(plan, tightest="doubled").data] == ["doubled naive: ε = 6 (tightest)"]


def test_an_unregistered_accountant_still_draws():
    """A record may name an accountant this engine does not have: it draws under its own name, never a KeyError."""
    run = pd.DataFrame({"step": [1, 2], "epsilon": [0.5, 0.9], "epsilon_gone": [3.0, 6.0]})
    assert [t.name for t in epsilon_figure(run).data] == ["RDP (every step): ε = 0.9"]
    plan = pd.DataFrame({"accountant": ["gone"], "epochs": [1.0], "epsilon": [3.0]})
    assert not plan_epsilon_figure(plan).data


def test_a_registered_model_is_listed_offered_and_trainable(bag, capsys):
    plain = listing(capsys, "models")
    assert "\nbag " in plain and "the recipe test's throwaway model" in plain
    assert json.loads(listing(capsys, "models", "--json"))[-1]["title"] == "Throwaway bag model"
    assert "bag" in models_for(DATASETS["digits"], "dpsgd") and "bag" in models_for(DATASETS["adult"], "dpsgd")

    spec = parse_spec(fast_spec(model="bag"))
    assert build_model(spec.model, n_features=64, n_classes=10)(torch.zeros(2, 64)).shape == (2, 10)

    at = open_app()
    assert "Throwaway bag model" in at.selectbox(key="train_model").options, "the Train form offers it"


PAGE_SCRIPT = """
import streamlit as st

from app.scratch import GREETING

st.title(GREETING)
"""
CHECK_NAVIGATION = """
import json, sys
from streamlit.testing.v1 import AppTest

import app

at = AppTest.from_file("app/main.py", default_timeout=120)
at.switch_page("views/scratch.py").run()  # straight to the page: the navigation runs it only if it lists it
shown = {"app": app.__file__, "errors": [str(e.value) for e in at.exception], "titles": [t.value for t in at.title]}
print(json.dumps(shown))
"""


def test_a_page_added_by_its_recipe_is_in_the_navigation(tmp_path):
    """Copy `app/`, add `views/scratch.py`, the package `scratch/` and one entry in `pages.py`, and open the page
    through the copied `main.py`'s navigation."""
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "app" / "views" / "scratch.py").write_text(textwrap.dedent(PAGE_SCRIPT))
    (tmp_path / "app" / "scratch").mkdir()
    (tmp_path / "app" / "scratch" / "__init__.py").write_text('GREETING = "A page added by its recipe"\n')
    pages = tmp_path / "app" / "pages.py"
    text = pages.read_text()
    last = text.rindex("\n)\n")
    entry = '\n    PageEntry(name="scratch", title="Scratch", icon=":material/science:"),'
    pages.write_text(text[:last] + entry + text[last:])

    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "DPLAB_HOME": str(tmp_path / "h")}
    done = subprocess.run(
        [sys.executable, "-c", CHECK_NAVIGATION], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["app"].startswith(str(tmp_path)), "the copy's app package, not the repository's"
    assert not shown["errors"] and shown["titles"] == ["A page added by its recipe"]
