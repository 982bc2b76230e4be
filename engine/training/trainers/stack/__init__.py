"""Vectorized sweeps: K DP-SGD runs of one model on one dataset trained as one stacked model.

The members' parameters are stacked along a leading axis (`torch.func.stack_module_state`) and one
`vmap` over `functional_call` runs all K forward passes and the one backward pass of book-keeping
clipping (`clipping.BookKeepingClipper`): the gradient of Σℓ with respect to every layer's *output*
δ, with each layer's input a, never a per-example gradient. Per-example norms, clip factors and the
clipped sums then follow layer by layer for all K members at once (`StackedClipper`). Members may
differ in σ (or target ε), C, δ, learning rate, momentum, schedules and seed.

What the members share, and what they do not:

- **the Poisson lot of each step**, drawn from the sampling stream of the *lead* member (the first):
  every member on its own is still an exact DP-SGD run with Poisson sampling at rate q, and its
  ledger is exactly that of a separate run; the privacy statement says so;
- **not the noise**: each member draws from its own noise stream (`engine.training.noise`: derived from
  its whole spec, so no two members share one; in release mode, from the OS), the very draws a separate
  run of its spec would make at the same step;
- **not the initialization**: each member's model is built from its own seed, as a separate run's;
- **DP-PCA**, where members agree on the release (`pca_release_identity`: data, k, σ_p, seed): one
  release, computed once, the one their separate runs make.

So the lead member follows its separate run step for step (up to floating-point summation order), and
every other member is a run of its spec with the same distribution as a separate one (its noise is its
separate run's; its lots are the lead's). Releasing several members of one stack together is accounted
in `joint_ledger` (K Gaussian mechanisms on each shared lot plus every distinct up-front release) and
stored as the stack's joint ε (`joint_epsilon`: the tightest of RDP and PLD).

The package: `clipping` (the stacked book-keeping clipped sums), `optimizer` (SGD, momentum and Adam
per member), `joint` (the joint ledger of releasing several members together), `stack_graph` (a step as one CUDA
graph), `stack_run` (which specs stack, the trainer). Like the single-run trainer it builds on the shared rooms
below (`inputs`, `run_setup`, `run_results`), never on the single-run trainer itself.
"""

from engine.training.trainers.stack.clipping import StackedClippedSum, StackedClipper
from engine.training.trainers.stack.joint import StackMember, joint_epsilon, joint_ledger, members_ledger
from engine.training.trainers.stack.optimizer import StackedOptimizer
from engine.training.trainers.stack.stack_run import STACK_KEYS, StackError, stack_key, stack_note, train_stack

__all__ = [
    "STACK_KEYS",
    "StackError",
    "StackMember",
    "StackedClippedSum",
    "StackedClipper",
    "StackedOptimizer",
    "joint_epsilon",
    "joint_ledger",
    "members_ledger",
    "stack_key",
    "stack_note",
    "train_stack",
]
