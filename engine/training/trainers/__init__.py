"""The trainers: what turns a run spec into steps, records and a result. They sit above the run setup
(`engine.training.run_setup`), the algorithms and the run results (`engine.training.run_results`) and share only
those: `single_run` trains one spec (any algorithm, through its registered step; the learners through their own
route), `stack` trains K DP-SGD specs of one model and dataset as one vmapped model. Neither imports the other;
only the pace (`engine.training.pace`) and the `engine.training` façade sit above them.

Submodules are imported directly (`from engine.training.trainers.single_run import train`)."""
