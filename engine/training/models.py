"""Models: logistic regression (one linear layer) and a ReLU MLP; all weights in nn.Linear layers."""

import itertools

from torch import nn

from engine.training.spec import MODELS


def build_model(name: str, *, n_features: int, n_classes: int, hidden_sizes: tuple[int, ...] = ()) -> nn.Sequential:
    """A fresh model; initialization draws from torch's global generator (seed it first)."""
    if name == "logreg":
        return nn.Sequential(nn.Linear(n_features, n_classes))
    if name == "mlp":
        widths = (n_features, *hidden_sizes)
        layers: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], n_classes))
    raise ValueError(f"model must be one of {', '.join(MODELS)}; got {name!r}")
