.PHONY: run test setup lint bench

# Set everything up and start the dashboard (http://localhost:8501) with a background worker.
run:
	bash scripts/run.sh

# Set everything up and run the whole test suite.
test:
	bash scripts/test.sh

setup:
	bash scripts/setup.sh requirements-dev.txt

lint:
	.venv/bin/ruff check .

# The benchmark suite (installs the benchmark-only Opacus first). ARGS="--quick" for a short run.
bench:
	bash scripts/setup.sh requirements-bench.txt
	DPLAB_DATA_DIR=$${DPLAB_DATA_DIR:-../shared/datasets} .venv/bin/python -m bench $(ARGS)
