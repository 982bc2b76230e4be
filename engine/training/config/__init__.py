"""What a run is asked to do and the numbers it trains with: the run spec and its validation (`spec`, with the
key and range tables in `keys`), the training plan with its privacy ledger (`plan`), lr / σ / C schedules
(`schedules`) and the catalogue of what the engine can train (`catalogue`).

Submodules are imported directly (`from engine.training.config.spec import parse_spec`)."""
