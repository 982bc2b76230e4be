.PHONY: run test setup lint

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
