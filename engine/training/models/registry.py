"""The models a run can train, one entry each, in the order the Train form offers them: its title and one sentence
for people, its builder, the spec keys that shape it, and which inputs it takes. `architectures` registers the
lab's own (logistic regression, the MLP, the CNN, the wide ResNet); `build_model` builds any registered one, the
Train form and `python -m engine models` list them. Imports nothing of the lab's but its mechanism
(`engine.registry`): every layer may read it.

A builder is called as `builder(n_features=, n_classes=, image_shape=, features=, **options)`: `image_shape` the
(C, H, W) of the model's input (None for tabular data), `features` "pixels" or "scatternet", and `options` the spec
keys of every model (`hidden`, `wrn_depth`, ...), of which it reads its own (`ModelEntry.options`)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.registry import Registry

ImageShape = tuple[int, int, int]


def any_input(image_shape: ImageShape | None, features: str) -> bool:
    return True


@dataclass(frozen=True, kw_only=True)
class ModelEntry:
    name: str  # its key in a spec: "logreg"
    title: str  # how the dashboard names it: "Logistic regression"
    description: str  # one sentence and its source, for `python -m engine models`
    builder: Callable[..., Any]  # -> a fresh torch.nn.Module taking flattened (B, n_features) inputs
    options: tuple[str, ...] = ()  # the spec keys that shape it ("hidden" for the MLP)
    needs_images: bool = False  # takes the image (or its scattering coefficients), never tabular or PCA inputs
    # Whether it takes inputs of this (C, H, W) (None: tabular) and kind ("pixels" or "scatternet").
    supports: Callable[[ImageShape | None, str], bool] = any_input


class UnknownModelError(ValueError):
    """A model name no entry is registered under."""


MODELS: Registry[ModelEntry] = Registry(kind="model", taken=ValueError, unknown=UnknownModelError)
register_model = MODELS.register
unregister_model = MODELS.unregister
registered_model = MODELS.registered
model_entry = MODELS.entry


def model_title(name: str) -> str:
    """How the dashboard names a model: its entry's title, or the name itself for one not registered."""
    return MODELS[name].title if name in MODELS else name


def models_taking(image_shape: ImageShape | None, features: str = "pixels") -> list[str]:
    """The registered models that take inputs of this shape and kind, in the registry's order."""
    return [
        name
        for name, entry in MODELS.items()
        if (image_shape is not None or not entry.needs_images) and entry.supports(image_shape, features)
    ]


def describe_models() -> list[dict]:
    """Every model for `python -m engine models`, as JSON-able dicts, in the registry's order."""
    return [
        {
            "name": e.name,
            "title": e.title,
            "description": e.description,
            "options": list(e.options),
            "needs_images": e.needs_images,
        }
        for e in MODELS.values()
    ]
