"""The training algorithms, one step chain each: DP-SGD (`dpsgd`, its CUDA-graph step `dpsgd_graph`), noisy
gradient descent (`noisy_gd`), the non-private baseline (`nonprivate`), anisotropic-noise DP-SGD (`aniso`, its
weights `aniso_weights`), the textbook private learners (`learners/`); the update rules they share
(`optimizers`) and scikit-learn's non-private reference (`baselines`).

Each algorithm module registers the builder of its step in the step registry (`registry`: `@register_step`,
`make_step`); importing this package imports them all, so the registry is full whenever anything here is
imported. The learners train through their own route (`learners.learner_runs`). The rooms below (config,
datasets, models, features, clipping, noise, canaries, run results) never import this package; the run setup
and the trainers above it (`engine.training.run_setup`, `engine.training.trainers`) call it.

Submodules are imported directly (`from engine.training.algorithms.dpsgd import dpsgd_step`)."""

from engine.training.algorithms import aniso, dpsgd, noisy_gd, nonprivate  # noqa: F401 (register their steps)
