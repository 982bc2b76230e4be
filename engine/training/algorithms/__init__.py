"""The training algorithms, one step chain each: DP-SGD (`dpsgd`), noisy gradient descent (`noisy_gd`), the
non-private baseline (`nonprivate`), anisotropic-noise DP-SGD (`aniso`), the textbook private learners
(`learners/`); the update rules they share (`optimizers`) and scikit-learn's non-private reference (`baselines`).
The trainers above them (`engine.training.trainers`) route a spec to its algorithm.

Submodules are imported directly (`from engine.training.algorithms.dpsgd import dpsgd_step`)."""
