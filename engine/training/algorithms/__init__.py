"""The training algorithms, one step chain each: DP-SGD (`dpsgd`), noisy gradient descent (`noisy_gd`), the
non-private baseline (`nonprivate`), anisotropic-noise DP-SGD (`aniso`), the textbook private learners
(`learners/`), K runs trained as one stack (`stacked/`); the update rules they share (`optimizers`) and
scikit-learn's non-private reference (`baselines`). `engine.training.trainer` routes a spec to its algorithm.

Submodules are imported directly (`from engine.training.algorithms.dpsgd import dpsgd_step`)."""
