"""The Train form's fields for the techniques behind the field's best DP accuracy: ScatterNet features, the wide
ResNet's shape, augmentation multiplicity and parameter averaging. Widgets only describe a spec."""

import streamlit as st

from app.common.choices import AUGMENTATION_MULTIPLICITIES, EMA_DECAYS
from app.train import widget_spec
from app.train.presets import WRN_DEPTHS, WRN_WIDTHS
from app.train.session_fields import choice, coerce, field_value, slider
from engine.training.datasets import DatasetInfo

FEATURES_HELP = (
    'ScatterNet: a fixed wavelet scattering transform of each image (Tramèr & Boneh 2021, "Differentially Private '
    'Learning Needs Better Features"), learned from no data, so it costs no ε; a linear model or the small CNN '
    "on it learns faster under noise than on pixels. The features of a dataset are computed once (minutes on a CPU)."
)
AUGMENTATION_HELP = (
    "Augmentation multiplicity K (De et al. 2022, §3.1): each example of a lot is seen as K random crops (and "
    "mirror images, where the data allow: never for digits); its gradient is the mean over the K copies, then "
    "clipped. One example still moves the clipped sum by at most C, so ε is exactly that of K = 1; each step "
    "costs about K times as much. 1 = off."
)
EMA_HELP = (
    "Parameter averaging: the evaluated and released model is the exponential moving average of the iterates, "
    "with decay β (De et al. 2022 use 0.999 and more). Averaging released iterates is post-processing: it costs no "
    "ε. The live accuracy chart shows the averaged model; the lot accuracy stays the iterate's. 0 = off."
)


def features_picker(info: DatasetInfo) -> None:
    """Pixels or ScatterNet features, for the image datasets large enough for the scattering transform."""
    options = widget_spec.features_for(info, field_value("algorithm"))
    if len(options) == 1:  # tabular data, small images, noisy GD: pixels (the inputs as they are) only
        coerce("features", options)
        return
    choice(st.radio, "Features", "features", options, widget_spec.FEATURE_TITLES, FEATURES_HELP)


def wrn_fields() -> None:
    """A wide ResNet's depth and width (Zagoruyko & Komodakis 2016; De et al. 2022's WRN-16-4 by default)."""
    slider(
        "Depth",
        WRN_DEPTHS,
        "wrn_depth",
        help="Layers of the wide ResNet (6k + 4): deeper fits more, and each step costs more.",
    )
    slider(
        "Width",
        WRN_WIDTHS,
        "wrn_width",
        help="Channel multiplier: WRN-16-4 is De et al. 2022's model for CIFAR-10.",
    )


def accuracy_techniques(info: DatasetInfo) -> None:
    """Augmentation multiplicity (DP-SGD on pixels of images) and parameter averaging (every gradient method)."""
    values = {name: field_value(name) for name in ("algorithm", "features", "use_pca", "model")}
    if widget_spec.augments(values, info):
        slider(
            "Augmentation multiplicity K",
            AUGMENTATION_MULTIPLICITIES,
            "augmentation_multiplicity",
            help=AUGMENTATION_HELP,
        )
    slider("Parameter averaging (EMA decay β)", EMA_DECAYS, "ema_decay", help=EMA_HELP)
