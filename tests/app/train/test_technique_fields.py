"""The Train and Sweep forms' fields for the techniques behind the best DP accuracy (ScatterNet features, the wide
ResNet, augmentation multiplicity, parameter averaging, budget-filling runs): each appears where it applies, cites
its paper in its tooltip, goes into the spec the engine accepts, and a spec with it fills the form back."""

import pytest

from app.train.presets import FILL_MODE, PRESETS, form_values
from app.train.widget_spec import models_for, raw_spec
from cache import RunStatus
from engine.jobs.workers.worker import Worker
from engine.training import DATASETS, parse_spec, plan_spec
from tests.apptest_helpers import open_app, open_page, train_form_spec
from tests.helpers import fast_spec


@pytest.fixture(autouse=True)
def _no_shared_data(monkeypatch):
    monkeypatch.delenv("DPLAB_DATA_DIR", raising=False)


def keys(at) -> set[str]:
    return {w.key for w in (*at.select_slider, *at.radio, *at.selectbox, *at.number_input, *at.checkbox)}


def test_image_pixels_offer_augmentation_and_every_gradient_method_averaging(home):
    at = open_app()
    at.selectbox(key="train_dataset").set_value("mnist").run()
    assert {"train_features", "train_augmentation_multiplicity", "train_ema_decay"} <= keys(at)
    multiplicity = at.select_slider(key="train_augmentation_multiplicity")
    assert "De et al. 2022" in multiplicity.help and "ε is exactly that of K = 1" in multiplicity.help
    assert "post-processing" in at.select_slider(key="train_ema_decay").help
    multiplicity.set_value(8).run()
    at.select_slider(key="train_ema_decay").set_value(0.999).run()
    spec = train_form_spec(at)
    assert spec["augmentation_multiplicity"] == 8 and spec["ema_decay"] == 0.999
    parse_spec(spec)  # the engine accepts what the form describes
    at.selectbox(key="train_dataset").set_value("adult").run()
    assert not at.exception, at.exception
    assert "train_augmentation_multiplicity" not in keys(at) and "train_features" not in keys(at)
    assert "augmentation_multiplicity" not in train_form_spec(at), "K kept from MNIST must not reach tabular data"
    assert train_form_spec(at)["ema_decay"] == 0.999


def test_a_run_with_augmentation_and_averaging_trains_from_the_dashboard(home, store):
    at = open_app()  # digits: 8×8 images, so augmentation applies
    at.number_input(key="train_epochs").set_value(2).run()
    at.select_slider(key="train_augmentation_multiplicity").set_value(2).run()
    at.select_slider(key="train_ema_decay").set_value(0.9).run()
    at.button(key="train").click().run()
    assert not at.exception, at.exception
    [run] = store.list_runs()
    assert run.spec["augmentation_multiplicity"] == 2 and run.spec["ema_decay"] == 0.9
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    finished = store.get_run(run.id)
    assert finished.status is RunStatus.FINISHED, finished.error
    plain = plan_spec(
        parse_spec({k: v for k, v in run.spec.items() if k not in ("augmentation_multiplicity", "ema_decay")})
    )
    assert finished.result["epsilon"] <= run.spec["target_epsilon"]
    assert finished.result["steps"] == plain.steps  # the same plan as the run without them
    at.run()
    assert any("finished" in h.value for h in at.subheader)


def test_scatternet_features_feed_the_cnn_and_take_no_augmentation(home):
    at = open_app()
    at.selectbox(key="train_dataset").set_value("fashion-mnist").run()
    features = at.radio(key="train_features")
    assert "Tramèr & Boneh 2021" in features.help and "costs no ε" in features.help
    features.set_value("scatternet").run()
    assert "train_augmentation_multiplicity" not in keys(at)
    at.selectbox(key="train_model").set_value("cnn").run()
    spec = train_form_spec(at)
    assert (spec["features"], spec["model"]) == ("scatternet", "cnn") and "augmentation_multiplicity" not in spec
    assert "wrn" not in models_for(DATASETS["mnist"], "dpsgd", "scatternet")
    parse_spec(spec)


def test_the_wide_resnet_takes_its_depth_and_width(home):
    at = open_app()
    at.selectbox(key="train_dataset").set_value("cifar10").run()
    at.selectbox(key="train_model").set_value("wrn").run()
    assert not at.exception, at.exception
    at.select_slider(key="train_wrn_depth").set_value(10).run()
    at.select_slider(key="train_wrn_width").set_value(2).run()
    spec = train_form_spec(at)
    assert (spec["model"], spec["wrn_depth"], spec["wrn_width"]) == ("wrn", 10, 2)
    assert "pca_dims" not in spec
    parse_spec(spec)
    assert "wrn" in models_for(DATASETS["digits"], "dpsgd")  # 8×8 digits: the smallest image the WRN takes
    assert "wrn" not in models_for(DATASETS["adult"], "dpsgd")


def test_filling_a_budget_sets_both_epsilon_and_sigma(home):
    at = open_app()
    modes = at.radio(key="train_mode")
    assert FILL_MODE in modes.options and "tightest accountant" in modes.help
    modes.set_value(FILL_MODE).run()
    assert {"train_target_epsilon", "train_noise_multiplier"} <= keys(at)
    spec = train_form_spec(at)
    assert spec["fill_budget"] is True and "target_epsilon" in spec and "noise_multiplier" in spec
    said = " ".join(c.value for c in at.caption)
    assert "Epochs filled from the budget:" in said and ("(RDP)" in said or "(PLD)" in said), said
    parse_spec(spec)
    at.selectbox(key="train_algorithm").set_value("noisy_gd").run()
    assert FILL_MODE not in at.radio(key="train_mode").options
    assert "fill_budget" not in train_form_spec(at)


@pytest.mark.parametrize(
    "extra",
    [
        {"ema_decay": 0.99},
        {"fill_budget": True, "target_epsilon": 3.0, "noise_multiplier": 1.1},
    ],
)
def test_a_spec_with_the_new_keys_fills_the_form_back(extra):
    spec = fast_spec() | extra
    assert raw_spec(form_values(spec)) == spec


def test_image_specs_round_trip_through_the_form():
    for spec in (
        fast_spec(dataset="mnist", model="cnn", features="scatternet", ema_decay=0.999),
        fast_spec(dataset="cifar10", model="wrn", wrn_depth=16, wrn_width=4, augmentation_multiplicity=4),
    ):
        values = form_values(spec)
        assert raw_spec(values, DATASETS[spec["dataset"]]) == spec


def test_the_new_presets_are_the_tables_rows():
    from bench.table_rows import SCATTER_CNN_ROWS
    from tests.app.train.test_train_page import preset_named

    for row in SCATTER_CNN_ROWS:
        title = "MNIST, ε = 3: ScatterNet" if row.spec["dataset"] == "mnist" else "Fashion-MNIST, ε = 3: ScatterNet"
        assert PRESETS[preset_named(title)].spec == row.spec | {"seed": 0}
    cifar = PRESETS[preset_named("CIFAR-10")]
    assert "De et al. 2022" in cifar.source and "56.8%" in cifar.source
    plan = plan_spec(parse_spec(cifar.spec))
    assert plan.filled_by is not None and plan.steps <= plan.steps_cap  # it fills ε = 1, within its 875-step cap
    for preset in PRESETS.values():  # through the form and back, every preset trains the same run
        shown = raw_spec(form_values(preset.spec), DATASETS[preset.spec["dataset"]])
        assert parse_spec(shown).canonical_json() == parse_spec(preset.spec).canonical_json()


def test_the_sweep_base_offers_averaging_and_augmentation(home, store):
    at = open_page("sweep")
    assert "sweep_base_ema_decay" in keys(at)
    at.selectbox(key="sweep_base_dataset").set_value("mnist").run()
    multiplicity = at.select_slider(key="sweep_base_augmentation_multiplicity")
    assert "De et al. 2022" in multiplicity.help
    at.selectbox(key="sweep_base_dataset").set_value("adult").run()
    assert "sweep_base_augmentation_multiplicity" not in keys(at)
