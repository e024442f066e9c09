#!/bin/bash
# The NVIDIA hook on real hardware (docs/gpu.md).
#   bash scripts/gpu-proof.sh prepare   here: builds .device/ (the gpu-probe image, Debian's squashfuse
#                                       and its libraries) for a GPU machine that has neither
#   bash scripts/gpu-proof.sh run       on the GPU machine, as root: runs nvidia-smi and a CUDA program in
#                                       hydria containers as an unprivileged user it creates
set -euo pipefail
cd "$(dirname "$0")/.."

prepare() {
    local build
    build=$(mktemp -d)
    .venv/bin/python -m testbed build gpu-probe "$build" >/dev/null
    rm -rf .device && mkdir -p .device/bin .device/lib
    HYDRIA_CACHE_PATH="$build/cache" .venv/bin/hydria import -q -o .device/gpu-probe.sqsh "oci-archive://$build/oci-archive.tar"
    cp "$(command -v squashfuse)" .device/bin/squashfuse.real
    for lib in $(ldd "$(command -v squashfuse)" | awk '/=> \//{print $3}' | grep -v 'libc.so'); do cp -L "$lib" .device/lib/; done
    printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\nLD_LIBRARY_PATH="$here/../lib" exec "$here/squashfuse.real" "$@"\n' > .device/bin/squashfuse
    chmod 755 .device/bin/squashfuse
    rm -rf "$build"
    du -sh .device
}

run() {
    local user=hydria-gpu work
    chmod 0666 /dev/fuse  # as scripts/setup.sh does: unprivileged squashfuse needs it
    id "$user" >/dev/null 2>&1 || useradd --create-home "$user"
    work=$(mktemp -d /tmp/hydria-gpu.XXXXXX)
    cp -r src .device "$work/"
    chmod -R a+rX "$work" && chown "$user" "$work"
    hydria() {
        setpriv --reuid="$user" --regid="$user" --init-groups env -i HOME="/home/$user" USER="$user" \
            PATH="$work/.device/bin:/usr/local/bin:/usr/bin:/bin" PYTHONPATH="$work/src" \
            HYDRIA_DATA_PATH="$work/data" HYDRIA_CONFIG_PATH="$work/config" HYDRIA_CACHE_PATH="$work/cache" \
            "$@" python3 -m hydria "${HYDRIA_ARGS[@]}"
    }
    local image="$work/.device/gpu-probe.sqsh"
    echo "== host"; nvidia-smi -L; uname -r
    echo "== hydria start IMAGE id -u (as $user, uid $(id -u $user))"; HYDRIA_ARGS=(start "$image" id -u); hydria
    echo "== hydria start IMAGE nvidia-smi"; HYDRIA_ARGS=(start "$image" nvidia-smi); hydria
    echo "== hydria start IMAGE (its CMD: cuda-probe)"; HYDRIA_ARGS=(start "$image"); hydria
    echo "== the driver files in the container"
    HYDRIA_ARGS=(start "$image" sh -c 'ls -l /usr/lib/x86_64-linux-gnu | grep -E "libcuda|nvidia-ml"; ldconfig -p | grep -E "libcuda|nvidia-ml"')
    hydria
    echo "== a named container, twice"; HYDRIA_ARGS=(create --name gpu "$image"); hydria
    HYDRIA_ARGS=(start gpu cuda-probe); hydria; hydria
    echo "== NVIDIA_VISIBLE_DEVICES=void: no GPU"; HYDRIA_ARGS=(start -e NVIDIA_VISIBLE_DEVICES=void "$image" sh -c 'cuda-probe; echo status $?'); hydria || true
    echo "== NVIDIA_VISIBLE_DEVICES=7 on a 1-GPU node"; HYDRIA_ARGS=(start "$image" true); hydria NVIDIA_VISIBLE_DEVICES=7 || echo "exit status $?"
    local left
    for _ in $(seq 50); do left=$(ps -u "$user" -o stat= | grep -vc '^Z' || true); [ "$left" = 0 ] && break; sleep 0.1; done
    echo "== processes of $user left behind (zombies aside): $left"
    echo "== start latency, median of 20 (ms): with the GPU hook, then with NVIDIA_VISIBLE_DEVICES=void"
    for devices in all void; do
        HYDRIA_ARGS=(start -e "NVIDIA_VISIBLE_DEVICES=$devices" "$image" true)
        for _ in $(seq 20); do
            local t0 t1; t0=$(date +%s%N); hydria; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 ))
        done | sort -n | sed -n 10p
    done
}

"${1:?usage: gpu-proof.sh prepare|run}"
