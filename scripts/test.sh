#!/usr/bin/env bash
# Install what the tests need and run the whole suite: unit tests and tests against real
# components (a local registry, squashfs tools, user namespaces as an unprivileged user).
# Run as root. Extra arguments go to pytest (and skip the lint), e.g. scripts/test.sh tests/unit -x
set -euo pipefail

cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
    echo "[test] ruff, mypy, and vermin (src/ must run on Python 3.9: RHEL 9's system Python)"
    .venv/bin/ruff check --quiet src testbed tests benchmarks
    .venv/bin/mypy --no-error-summary
    .venv/bin/vermin --quiet --no-tips --violations --eval-annotations -t=3.9- src/hydria
fi
exec .venv/bin/python -m pytest -ra "$@"
