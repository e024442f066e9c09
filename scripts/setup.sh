#!/usr/bin/env bash
# Set up this machine for hydria: system packages, /dev/fuse access, the virtual environment in
# .venv, and the unprivileged test users. Run as root; safe to run again (it skips what is done).
set -euo pipefail

cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh must run as root (it installs Debian packages and creates test users)" >&2
    exit 1
fi

PACKAGES=(
    squashfs-tools squashfs-tools-ng squashfuse fuse-overlayfs fuse3   # build, mount, unpack images
    libsquashfuse-dev libfuse3-dev libzstd-dev pkg-config              # hydria's squashfs reader (install-reader)
    bindfs                                                             # a FUSE data path (stands in for NFS)
    tmux                                                               # a real terminal for the progress display
    docker-registry                                                    # the local test registry
    busybox-static mmdebstrap                                          # test images from Debian packages
    skopeo umoci podman                                                # the peer pipeline; podman:// tests
    charliecloud-runtime charliecloud-builders                         # ch-run, ch-image: the read and build benchmarks' peers
    zstd pigz uidmap acl python3-venv
    gcc libc6-dev                                                      # the SPANK shim, fake GPU driver libraries
    slurm-wlm munge libslurm-dev iproute2 openssh-server               # test clusters (nodes: netns; sshd per node)
    libpmix-dev libmpich-dev                                           # srun --mpi=pmix; the PMI2 test program
    ibverbs-providers                                                  # host verbs providers (MELLANOX_MOUNT_DRIVER)
)
missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "[setup] installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Unprivileged squashfuse and fuse-overlayfs need /dev/fuse; some machines ship it as 0600.
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
    chmod 0666 /dev/fuse
fi

# Debian's own Python, not one under root's home (pyenv), so the test users can run the venv.
PYTHON=${PYTHON:-/usr/bin/python3}
if [ ! -x .venv/bin/python ] || [ "$(readlink -f .venv/bin/python)" != "$(readlink -f "$PYTHON")" ]; then
    rm -rf .venv
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.hydria-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,dev]'
    touch "$stamp"
fi
# hydria's squashfs reader, beside the venv's hydria (runtime/reader.py), rebuilt when its source changes.
if [ ! -x .venv/libexec/hydria/hydria-squashfuse ] || [ src/hydria/runtime/squashfs_reader.c -nt .venv/libexec/hydria/hydria-squashfuse ]; then
    .venv/bin/hydria install-reader >/dev/null
fi
# Byte-compile as root: the test users cannot write __pycache__ here, and compiling on every
# start would cost them tens of milliseconds.
.venv/bin/python -m compileall -q src testbed >/dev/null

for user in hydria-test hydria-test2 hydria-store; do  # hydria-store: the image store's owner
    id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
done

# The test users run hydria from this checkout: they must be able to reach it.
if ! runuser -u hydria-test -- .venv/bin/hydria version >/dev/null; then
    echo "[setup] the test user hydria-test cannot run $(pwd)/.venv/bin/hydria;" \
         "put the checkout where every user can read it (e.g. not under /root)" >&2
    exit 1
fi
echo "[setup] ready: $(.venv/bin/hydria version)"
