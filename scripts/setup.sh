#!/usr/bin/env bash
# Create .venv/ in the repository root and install the pinned requirements into it.
# Idempotent: when the requirement files have not changed since the last install, it does nothing.
# Usage: scripts/setup.sh [requirements.txt|requirements-dev.txt]
set -euo pipefail
cd "$(dirname "$0")/.."
req="${1:-requirements.txt}"
python="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "setup: Python >= 3.11 is required (found $("$python" --version 2>&1))" >&2; exit 1; }
  echo "setup: creating .venv"
  "$python" -m venv .venv
fi

stamp=".venv/.installed-${req%.txt}"
want="$(cat requirements.txt "$req" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: installing $req into .venv (first time: about two minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
echo "$want" > "$stamp"
