#!/usr/bin/env bash
# Set everything up (venv with test tools, Debian's Chromium for the browser test) and run the
# whole test suite plus the linters. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh requirements-dev.txt

if [ ! -x /usr/bin/chromium ]; then
  echo "test: installing Debian's chromium for the browser test"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi

if [ -z "${DPLAB_DATA_DIR:-}" ] && [ -d ../shared/datasets ]; then
  export DPLAB_DATA_DIR="$(cd ../shared/datasets && pwd)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/hadolint Dockerfile
.venv/bin/python -m pytest "$@"
