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

# One stamp per requirement file, holding the hash of what it installs; the dev file includes the
# runtime one (through requirements-bench.txt), so installing it also stamps requirements.txt.
stamp_of() { echo ".venv/.installed-${1%.txt}"; }
hash_of() { cat requirements.txt requirements-bench.txt "$1" | sha256sum | cut -d' ' -f1; }
if [ -f "$(stamp_of "$req")" ] && [ "$(cat "$(stamp_of "$req")")" = "$(hash_of "$req")" ]; then
  exit 0
fi
echo "setup: installing $req into .venv (first time: about two minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
hash_of "$req" > "$(stamp_of "$req")"
hash_of requirements.txt > "$(stamp_of requirements.txt)"
