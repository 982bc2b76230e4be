"""What a model sees: DP-PCA input projection (`pca`) and fixed ScatterNet features (`scatternet`).

Submodules are imported directly (`from engine.training.features import scatternet`)."""
