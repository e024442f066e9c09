#!/usr/bin/env bash
# The main job on a built-in default: set up, build a small image from Debian packages, serve it
# from a local registry, import it with hydria and start a container that prints /etc/os-release.
# Run as root; the container itself runs as the unprivileged user hydria-test.
set -euo pipefail

cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m testbed demo "$@"
