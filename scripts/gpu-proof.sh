#!/bin/bash
# The NVIDIA hook on real hardware (docs/gpu.md).
#   bash scripts/gpu-proof.sh prepare   here: builds .device/ (the gpu-probe image, Debian's squashfuse
#                                       and its libraries) for a GPU machine that has neither
#   bash scripts/gpu-proof.sh run       on the GPU machine, as root: runs nvidia-smi and a CUDA program in
#                                       hydria containers as an unprivileged user it creates
# With NVIDIA_CTK_BIN=DIR, prepare also carries DIR's nvidia-ctk and nvidia-cdi-hook (NVIDIA's container
# toolkit, which Debian does not ship: `go build -mod=vendor ./cmd/nvidia-ctk ./cmd/nvidia-cdi-hook` in
# its source), and run then proves CDI: nvidia-ctk writes the node's spec, hydria start --device reads it.
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
    if [ -n "${NVIDIA_CTK_BIN:-}" ]; then
        strip -o .device/bin/nvidia-ctk "$NVIDIA_CTK_BIN/nvidia-ctk"
        strip -o .device/bin/nvidia-cdi-hook "$NVIDIA_CTK_BIN/nvidia-cdi-hook"
        mkdir -p .device/python  # PyYAML for the spec nvidia-ctk writes (pure Python where its C part is for another Python)
        cp -r "$(.venv/bin/python -c 'import os, yaml; print(os.path.dirname(yaml.__file__))')" .device/python/
    fi
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
            PATH="$work/.device/bin:/usr/local/bin:/usr/bin:/bin" PYTHONPATH="$work/src:$work/.device/python" \
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
        median_ms
    done
    if [ -x "$work/.device/bin/nvidia-ctk" ]; then cdi; else echo "== CDI: not proven (prepare with NVIDIA_CTK_BIN=DIR)"; fi
}

median_ms() {  # of 20 runs of the hydria function
    for _ in $(seq 20); do
        local t0 t1; t0=$(date +%s%N); hydria "$@"; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 ))
    done | sort -n | sed -n 10p
}

cdi() {  # in run's scope: NVIDIA's generator writes the node's spec, hydria start --device reads it
    local spec=/var/run/cdi/nvidia.yaml
    echo "== nvidia-ctk $("$work/.device/bin/nvidia-ctk" --version | head -1) cdi generate (as root)"
    mkdir -p /var/run/cdi
    "$work/.device/bin/nvidia-ctk" cdi generate --nvidia-cdi-hook-path="$work/.device/bin/nvidia-cdi-hook" \
        --output="$spec" 2>&1 | grep -v 'level=info' | tail -5 || true
    if ! grep -q libcuda "$spec" 2>/dev/null; then
        echo "== no libcuda in the spec: again with --driver-root=/usr/local/nvidia"
        "$work/.device/bin/nvidia-ctk" cdi generate --driver-root=/usr/local/nvidia \
            --nvidia-cdi-hook-path="$work/.device/bin/nvidia-cdi-hook" --output="$spec" 2>&1 | grep -v 'level=info' | tail -5 || true
    fi
    echo "== the spec: $(grep -c 'hostPath' "$spec") mounts, hooks:"
    grep -A2 -- '- nvidia-cdi-hook' "$spec" | grep -vE 'nvidia-cdi-hook|^--' | sort | uniq -c || true
    echo "== hydria cdi list"; HYDRIA_ARGS=(cdi list); hydria || echo "exit status $?"
    echo "== hydria start --device nvidia.com/gpu=all (built-in hook off: NVIDIA_VISIBLE_DEVICES=void)"
    HYDRIA_ARGS=(start -e NVIDIA_VISIBLE_DEVICES=void --device nvidia.com/gpu=all "$image" sh -c \
        'cuda-probe; nvidia-smi -L; ls /dev/nvidia*; ldconfig -p | grep -E "libcuda|nvidia-ml"; grep Cap[EP] /proc/self/status')
    hydria || echo "exit status $?"
    echo "== hydria start --device nvidia.com/gpu=0 cuda-probe"
    HYDRIA_ARGS=(start -e NVIDIA_VISIBLE_DEVICES=void --device nvidia.com/gpu=0 "$image" cuda-probe); hydria || echo "exit status $?"
    echo "== HYDRIA_NVIDIA_CDI=y: the image's NVIDIA_VISIBLE_DEVICES served from the spec"
    HYDRIA_ARGS=(start "$image" sh -c 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; cuda-probe')
    hydria HYDRIA_NVIDIA_CDI=y || echo "exit status $?"
    echo "== start latency, median of 20 (ms): --device nvidia.com/gpu=all, then HYDRIA_NVIDIA_CDI=y"
    HYDRIA_ARGS=(start -e NVIDIA_VISIBLE_DEVICES=void --device nvidia.com/gpu=all "$image" true); median_ms
    HYDRIA_ARGS=(start "$image" true); median_ms HYDRIA_NVIDIA_CDI=y
}

"${1:?usage: gpu-proof.sh prepare|run}"
