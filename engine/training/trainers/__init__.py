"""The trainers: what turns a run spec into steps, records and a result. They sit above the algorithms and call
them: `single_run` trains one spec (any algorithm, through its registered step), `stack` trains K DP-SGD specs of
one model and dataset as one vmapped model.

Submodules are imported directly (`from engine.training.trainers.single_run import train`)."""
