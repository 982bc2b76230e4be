#!/usr/bin/env bash
# Set everything up, then start the dashboard and one background worker on the embedded default
# (SQLite store in the data home, local worker process, built-in digits dataset).
# Ctrl-C stops both; a run in training goes back to the queue and restarts next time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh requirements.txt

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${DPLAB_DATA_DIR:-}" ] && [ -d ../shared/datasets ]; then
  export DPLAB_DATA_DIR="$(cd ../shared/datasets && pwd)"
fi
address="${DPLAB_ADDRESS:-localhost}"
port="${DPLAB_PORT:-8501}"

.venv/bin/python -m engine worker &
worker=$!
.venv/bin/python -m streamlit run app/main.py --server.address "$address" --server.port "$port" \
  --server.headless true --browser.gatherUsageStats false &
dashboard=$!

stop() {
  trap - INT TERM
  echo
  echo "Stopping the dashboard and the worker..."
  kill -TERM "$dashboard" "$worker" 2>/dev/null || true
  wait "$dashboard" "$worker" 2>/dev/null || true
  exit 0
}
trap stop INT TERM
echo "Dashboard: http://localhost:$port   (worker pid $worker; Ctrl-C stops both)"
wait -n "$dashboard" "$worker" || true
echo "A process exited; stopping the other." >&2
stop
