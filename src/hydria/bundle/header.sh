#!/bin/bash
# A hydria bundle: this script, then the compressed tar archives it extracts (hydria's runtime in
# .hydria/, then the image's root filesystem). Made by `hydria bundle`; see docs/bundle.md.
set -euo pipefail

description=@DESCRIPTION@
compression=@COMPRESSION@
decompress=@DECOMPRESS@
target_dir=@TARGET@
runtime_version=@VERSION@
sha256_sums=@SHA256@
part_sizes=(@SIZES@)
total_kb=@TOTAL_KB@
payload_offset=@OFFSET@

bundle::err() {
    echo "[ERROR] $*" >&2
    exit 1
}

bundle::usage() {
    printf "Usage: %s [options] [--] [COMMAND] [ARG...]\n" "${0##*/}"
    if [ "${description}" != "none" ]; then
        printf "\n%s\n" "${description}"
    fi
    cat <<'EOF'

 Options:
   -i, --info           Display the information about this bundle
   -k, --keep           Keep the bundle extracted in the target directory
   -q, --quiet          Suppress the progress output
   -v, --verify         Verify that the host configuration is compatible with the bundle
   -x, --extract        Extract the bundle in the target directory and exit (implies --keep)

   -c, --conf CONFIG    Specify a configuration script to run before the container starts
   -e, --env KEY[=VAL]  Export an environment variable inside the container
   -m, --mount FSTAB    Perform a mount from the host inside the container (colon-separated)
       --device NAME    Give the container a CDI device of this host (VENDOR/CLASS=NAME)
       --rc SCRIPT      Override the command script inside the container
   -r, --root           Ask to be remapped to root inside the container
   -w, --rw             Make the container root filesystem writable
EOF
    exit "${1:-0}"
}

bundle::info() {
    if [ -n "${sha256_sums}" ]; then
        printf "Checksum: %s\n" "${sha256_sums}"
    fi
    printf "Compression: %s\nDescription: %s\nRuntime version: %s\nTarget directory: %s\nUncompressed size: %s KB\n" \
      "${compression}" "${description}" "${runtime_version}" "${target_dir}" "${total_kb}"
    exit 0
}

# The bytes of payload part $1 on stdout.
bundle::part() {
    local -i offset=${payload_offset} i
    for ((i = 0; i < $1; i++)); do
        offset+=${part_sizes[i]}
    done
    dd if="$0" iflag=skip_bytes,count_bytes skip="${offset}" count="${part_sizes[$1]}" bs=1M status=none
}

bundle::check() {
    local -i i
    local expected actual
    [ -z "${sha256_sums}" ] && return
    read -r -a expected <<< "${sha256_sums}"
    for i in "${!part_sizes[@]}"; do
        actual=$(bundle::part "${i}" | sha256sum)
        if [ "${actual%% *}" != "${expected[i]}" ]; then
            bundle::err "Checksum validation failed"
        fi
    done
}

bundle::verify_line() {
    printf "%-34s: %s\n" "$1" "$2"
}

bundle::verify() {
    local config="" param value
    for config in "/proc/config.gz" "/boot/config-$(uname -r)" ""; do
        [ -z "${config}" ] || [ -r "${config}" ] && break
    done
    [ -z "${config}" ] && bundle::err "Could not find kernel configuration"
    printf "Kernel configuration:\n\n"
    for param in CONFIG_NAMESPACES CONFIG_USER_NS CONFIG_SECCOMP_FILTER CONFIG_OVERLAY_FS; do
        if zgrep -q "^${param}=y" "${config}"; then
            bundle::verify_line "${param}" "OK"
        elif zgrep -q "^${param}=m" "${config}"; then
            bundle::verify_line "${param}" "OK (module)"
        else
            bundle::verify_line "${param}" "KO"
        fi
    done
    printf "\nKernel command line:\n\n"
    for param in "vsyscall=native" "vsyscall=emulate"; do
        if grep -q "${param}" /proc/cmdline; then
            bundle::verify_line "${param}" "OK"
        else
            bundle::verify_line "${param}" "KO (required if glibc <= 2.13)"
        fi
    done
    printf "\nKernel parameters:\n\n"
    for param in kernel/unprivileged_userns_clone user/max_user_namespaces user/max_mnt_namespaces; do
        [ -r "/proc/sys/${param}" ] || continue
        value=$(< "/proc/sys/${param}")
        bundle::verify_line "${param/\//.}" "$([ "${value}" -gt 0 ] && echo OK || echo KO)"
    done
    printf "\nHost programs:\n\n"
    for param in python3 ${decompress%% *} tar nvidia-smi; do
        if command -v "${param}" > /dev/null; then
            bundle::verify_line "${param}" "OK"
        elif [ "${param}" = "nvidia-smi" ]; then
            bundle::verify_line "${param}" "KO (required for GPU support)"
        else
            bundle::verify_line "${param}" "KO"
        fi
    done
    exit 0
}

bundle::extract() {
    local -r dest="$1"
    local -i available i
    available=$(df -k --output=avail "${dest}" | tail -n 1)
    if [ "${available}" -lt "${total_kb}" ]; then
        bundle::err "Not enough space left in ${dest%/*} (${total_kb} KB needed)"
    fi
    for i in "${!part_sizes[@]}"; do
        bundle::part "${i}" | ${decompress} | tar -C "${dest}" -xpf - \
          || bundle::err "Could not extract the bundle into ${dest}"
    done
}

bundle::remove() {
    chmod -R u+rwX "$1" 2> /dev/null || true
    rm -rf --one-file-system "$1"
}

bundle::check

args=()
while [ $# -gt 0 ]; do
    case "$1" in
    -v|--verify) bundle::verify ;;
    -i|--info) bundle::info ;;
    -k|--keep) keep=y; shift ;;
    -x|--extract) extract=y; keep=y; shift ;;
    -q|--quiet) shift ;;
    -r|--root|-w|--rw) args+=("$1"); shift ;;
    -c|--conf|-e|--env|-m|--mount|--rc|--device)
        if [ -z "${2-}" ]; then
            echo "[ERROR] $1 needs a value" >&2
            bundle::usage 1 >&2
        fi
        args+=("$1" "$2"); shift 2 ;;
    --conf=?*|--env=?*|--mount=?*|--rc=?*|--device=?*) args+=("$1"); shift ;;
    -h|--help) bundle::usage ;;
    --) shift; break ;;
    -?*)
        echo "[ERROR] Unknown option: $1 (the bundle's options come before the command, the command's after --)" >&2
        bundle::usage 1 >&2 ;;
    *) break ;;
    esac
done

command -v python3 > /dev/null || bundle::err "Command not found: python3"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || bundle::err "python3 is older than 3.9, which hydria's runtime needs: put a newer one first in PATH"
command -v "${decompress%% *}" > /dev/null || bundle::err "Command not found: ${decompress%% *}"

if [ -n "${keep-}" ]; then
    rootfs=$(realpath -m "${target_dir}")
    if [ -e "${rootfs}" ]; then
        bundle::err "File already exists: ${rootfs}"
    fi
    rundir="${rootfs%/*}/.${rootfs##*/}"
    mkdir -m 0700 -p "${rootfs}" "${rundir}"
    trap 'rmdir "${rundir}" 2> /dev/null || true' EXIT
    trap 'bundle::remove "${rootfs}"; exit 1' ERR
else
    rootfs=$(mktemp -d --tmpdir="${HYDRIA_TEMP_PATH:-${TMPDIR:-/tmp}}" "${target_dir##*/}.XXXXXXXXXX")
    rundir="${rootfs%/*}/.${rootfs##*/}"
    mkdir -m 0700 -p "${rundir}"
    trap 'bundle::remove "${rootfs}"; rmdir "${rundir}" 2> /dev/null || true' EXIT
fi

bundle::extract "${rootfs}"
trap - ERR
[ -n "${extract-}" ] && exit 0

set +e
PYTHONPATH="${rootfs}/.hydria/lib" python3 -m hydria.cli.bundle_run "${rootfs}" "${rundir}" "${args[@]}" -- "$@"
exit $?
