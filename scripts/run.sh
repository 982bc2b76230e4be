#!/usr/bin/env bash
# Set everything up, then start the dashboard and its worker pool on the embedded default (SQLite
# store in the data home, local worker processes: one per GPU, else one; built-in digits dataset).
#
# The dashboard owns no run: the workers write to the store, the dashboard only reads it. If the
# dashboard dies (even kill -9) it is restarted and shows every run as it was; training goes on.
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

.venv/bin/python -m engine worker ${DPLAB_WORKERS:+--workers "$DPLAB_WORKERS"} &
workers=$!
dashboard=""
stopping=0

stop() {
  trap - INT TERM
  stopping=1
  echo
  echo "Stopping the dashboard and the workers..."
  [ -n "$dashboard" ] && kill -TERM "$dashboard" 2>/dev/null || true
  kill -TERM "$workers" 2>/dev/null || true
  wait 2>/dev/null || true
  exit 0
}
trap stop INT TERM

echo "Dashboard: http://$address:$port   (worker pool pid $workers; Ctrl-C stops both)"
while [ "$stopping" -eq 0 ]; do
  .venv/bin/python -m streamlit run app/main.py --server.address "$address" --server.port "$port" \
    --server.headless true --browser.gatherUsageStats false &
  dashboard=$!
  wait -n "$dashboard" "$workers" || true
  if ! kill -0 "$workers" 2>/dev/null; then
    echo "The worker pool exited; stopping the dashboard." >&2
    stop
  fi
  echo "The dashboard exited; restarting it (runs and workers are unaffected)." >&2
  sleep 1
done
