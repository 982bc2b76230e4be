"""What a model sees and is: the models (`models`), DP-PCA input projection (`pca`) and fixed ScatterNet
features (`scatternet`).

Submodules are imported directly (`from engine.training.features.models import build_model`)."""
