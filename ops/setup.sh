#!/usr/bin/env bash
# Installs everything Corral and its tests need into .venv/ at the repository root, and
# redis-server when the machine lacks it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# pip's and setuptools' chatter (editable-install notices) goes to a log shown only on failure.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
# uv installs the same requirements as pip, from the same index, in seconds where pip takes a
# minute or more (its cache is in ~/.cache/uv); pip does it when uv cannot be had. Both take
# the versions of ops/lock/dev.txt (the set that last passed CI) as constraints, so a fresh
# clone does not meet a release nobody has run yet.
echo "setup: installing corral (editable) with its dev tools"
if quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check uv; then
  # --compile-bytecode: pip compiles what it installs, uv only when asked; where
  # PYTHONDONTWRITEBYTECODE is set (this machine), every process would compile celery, boto3,
  # pydantic... in memory at each start (CI's tests took 1,219 s against about 1,000).
  quietly .venv/bin/uv pip install --python .venv/bin/python --compile-bytecode \
    -c ops/lock/dev.txt -e '.[dev]'
else
  echo "setup: uv could not be installed; pip installs instead"
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c ops/lock/dev.txt -e '.[dev]'
fi
.venv/bin/python -c 'import corral.shared, corral.services' >/dev/null
# The project's own bytecode, compiled once here. An editable install compiles none of it, and
# where PYTHONDONTWRITEBYTECODE is set (this machine sets it) no process writes it either: each
# `corral` process (the API, every worker and beat, each CLI call) compiled every module it
# imported, about a quarter of the instructions of an API's or a worker's start. A module
# changed later is compiled again in memory by whoever imports it (its source is newer).
echo "setup: compiling corral's modules"
quietly .venv/bin/python -m compileall -q -j 0 shared services workers

# System packages the tests use: redis-server (tests start their own on a free port),
# redis-sentinel (the Sentinel failover test starts its own sentinels), Debian's
# docker-compose (v1, validates docker-compose.yml offline, without an engine) and chromium.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
# Debian's Chromium and its driver: the web console's browser tests (tests/integration/test_console_browser.py)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive quietly $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Ray for the tests that run real Ray clusters (tests/ray_venv.py; never a dependency of
# Corral itself): a virtualenv of its own in ~/.cache/corral, outside the clone, so a fresh
# clone on this machine (CI's) finds it made. The tests make it when missing too.
echo "setup: Ray for the tests in ~/.cache/corral"
.venv/bin/python tests/ray_venv.py || echo "setup: Ray could not be installed; the real-Ray tests will try again"

echo "setup: done ($(.venv/bin/corral --version 2>/dev/null || echo corral), redis-server $(redis-server --version | sed -n "s/.*v=\([^ ]*\).*/\1/p"))"
