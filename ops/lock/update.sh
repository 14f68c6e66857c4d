#!/usr/bin/env bash
# Regenerate the image's lock files with pip-tools (pip-compile), for the image's Python
# (ops/Dockerfile: 3.11 on Linux). Run from a Python 3.11 venv with pip-tools installed:
#   pip install pip-tools && ops/lock/update.sh
# Only the registry is read: local pip settings (extra indexes, wheel folders, constraints)
# are left out so the lock is what a clean machine resolves.
#
# ops/lock/dev.txt (the development and CI set, constraints for ops/setup.sh) is not compiled
# here: it is the set a green `bash .ci/run` ran, written from that run's venv:
#   .venv/bin/uv pip freeze --python .venv/bin/python --exclude-editable --exclude uv
# under the header it has.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -c 'import sys; assert sys.version_info[:2] == (3, 11), "run with Python 3.11, the image'"'"'s"'
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
common=(--quiet --generate-hashes --strip-extras --no-emit-index-url --resolver=backtracking)
CUSTOM_COMPILE_COMMAND="ops/lock/update.sh" pip-compile "${common[@]}" \
  -o ops/lock/requirements.lock pyproject.toml
CUSTOM_COMPILE_COMMAND="ops/lock/update.sh" pip-compile "${common[@]}" --allow-unsafe \
  -o ops/lock/build.lock ops/lock/build.in
