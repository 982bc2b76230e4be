"""The models a run can train: the registry (`registry`: one `ModelEntry` per model, `register_model`), the
architectures of the lab's own and their registration (`architectures`), the wide ResNets (`wide_resnet`) and the
layers of the lab's own they use (`layers`).

Submodules are imported directly (`from engine.training.models.architectures import build_model`). Importing the
package imports `architectures`, so the registry always holds the lab's models; a new model is a module here that
calls `register_model`, and its import line below."""

from engine.training.models import architectures

__all__ = ["architectures"]
