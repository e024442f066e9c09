# Shell helpers for hook scripts, with the names and behaviour of enroot's common.sh, so that a hook
# that runs 'source "${ENROOT_LIBRARY_PATH}/common.sh"' works under hydria unchanged.
# Written for hydria (docs/migration.md); bash 4.2 or later, as enroot's hooks are.

[ -n "${_HYDRIA_COMMON_SH-}" ] && return 0
readonly _HYDRIA_COMMON_SH=1

# Colours on a terminal that has them; NO_COLOR turns them off.
if [ -t 2 ] && [ -z "${NO_COLOR-}" ] && command -v tput > /dev/null 2>&1 && [ "$(tput colors 2> /dev/null || echo 0)" -ge 8 ]; then
    readonly clr=$(tput sgr0) bold=$(tput bold) red=$(tput setaf 1) green=$(tput setaf 2) \
        yellow=$(tput setaf 3) blue=$(tput setaf 4)
fi

# common::fmt COLOUR TEXT: TEXT in the colour named by the variable COLOUR (plain without colours).
common::fmt() {
    local -r colour="$1" text="$2"
    printf "%s%s%s" "${!colour-}" "${text}" "${clr-}"
}

# common::log [LEVEL [MESSAGE|-]]: "[LEVEL] MESSAGE" on stderr; "-" logs each line of stdin.
common::log() {
    local -r level="${1-}" message="${2-}"
    local prefix="" line=""

    [ -n "${message}" ] || return 0
    case "${level}" in
    INFO)  prefix=$(common::fmt blue "[INFO]") ;;
    WARN)  prefix=$(common::fmt yellow "[WARN]") ;;
    ERROR) prefix=$(common::fmt red "[ERROR]") ;;
    esac
    if [ "${message}" = "-" ]; then
        while IFS= read -r line; do
            printf "%s %b\n" "${prefix}" "${line}" >&2
        done
    else
        printf "%s %b\n" "${prefix}" "${message}" >&2
    fi
}

# common::err MESSAGE: log it as an error and end the script with status 1.
common::err() {
    common::log ERROR "$1"
    exit 1
}

# common::checkcmd COMMAND...: end with an error naming the first command that is not installed.
common::checkcmd() {
    local name
    for name in "$@"; do
        command -v "${name}" > /dev/null 2>&1 || common::err "Command not found: ${name}"
    done
}

# common::read ARGS...: the read builtin, without failing at the end of the input.
common::read() {
    read "$@" || :
}

# common::readstrarray ARRAY TEXT: the lines of TEXT into the array named ARRAY (none for "").
common::readstrarray() {
    local -r array="$1" text="$2"
    [ -z "${text}" ] || readarray -t "${array}" <<< "${text}"
}

# common::chdir DIR: cd, or end with an error.
common::chdir() {
    cd "$1" 2> /dev/null || common::err "Could not change directory: $1"
}

# common::realpath PATH: the canonical path (links resolved), or end with an error.
common::realpath() {
    local resolved
    resolved=$(readlink -f -- "$1" 2> /dev/null) || common::err "No such file or directory: $1"
    printf "%s" "${resolved}"
}

# common::mountpoint PATH: the mount point that holds PATH.
common::mountpoint() {
    local path
    path=$(common::realpath "$1")
    while [ -n "${path}" ] && ! mountpoint -q -- "${path}"; do
        path=${path%/*}
    done
    printf "%s" "${path:-/}"
}

# common::rmall PATH: remove a tree, on its file system only, making read-only parts writable first if need be.
common::rmall() {
    local -r path="$1"
    rm -rf --one-file-system --preserve-root -- "${path}" 2> /dev/null && return 0
    chmod -f -R u+rwX -- "${path}" || :
    rm -rf --one-file-system --preserve-root -- "${path}"
}

# common::mktmpdir PREFIX: a new private directory PREFIX.XXXXXXXXXX under the temporary path.
common::mktmpdir() {
    umask 077
    mktemp -d -p "${ENROOT_TEMP_PATH:-${HYDRIA_TEMP_PATH:-${TMPDIR:-/tmp}}}" "$1.XXXXXXXXXX"
}

# common::fixperms PATH: give the owner read access everywhere and write access to directories
# (some distributions ship files that only CAP_DAC_OVERRIDE could otherwise read).
common::fixperms() {
    local -r path="$1"
    chmod -f -R u+rX -- "${path}" || :
    find "${path}" -maxdepth 15 -type d ! -perm -u=w -exec chmod -f u+w {} + || :
}

# common::getpwent / common::getgrent: the host's passwd / group entry of the caller (the id
# mapped into the container's user namespace).
common::getpwent() {
    local inside outside count
    read -r inside outside count < /proc/self/uid_map
    getent passwd "${outside}"
}

common::getgrent() {
    local inside outside count
    read -r inside outside count < /proc/self/gid_map
    getent group "${outside}"
}

# common::envsubst FILE: FILE with each ${NAME} replaced by the variable's value (empty when unset).
common::envsubst() {
    local -r file="$1"
    [ -f "${file}" ] || return 0
    awk '{
        rest = $0; out = ""
        while (match(rest, /\$\{[A-Za-z_][A-Za-z0-9_]*\}/)) {
            out = out substr(rest, 1, RSTART - 1) ENVIRON[substr(rest, RSTART + 2, RLENGTH - 3)]
            rest = substr(rest, RSTART + RLENGTH)
        }
        print out rest
    }' "${file}"
}

# common::envfmt FILE: tidy an environment file in place: no indentation, comments, blank or
# malformed lines, no ENROOT_* variables, and no quotes around a value.
common::envfmt() {
    sed -i -e 's/^[[:space:]]*//' \
        -e '/^$/d' -e '/^#/d' \
        -e '/^[[:alpha:]_][[:alnum:]_]*=/!d' \
        -e '/^ENROOT_/d' \
        -e "s/^\([[:alpha:]_][[:alnum:]_]*\)=[\"']\(.*\)[\"'][[:space:]]*\$/\1=\2/" \
        "$1"
}

# common::runparts list|exec SUFFIX DIR: list DIR/*SUFFIX, or run the executable ones in order
# (ending with an error when one fails).
common::runparts() {
    local -r action="$1" suffix="$2" dir="$3"
    local file status
    for file in "${dir}"/*"${suffix}"; do
        [ -e "${file}" ] || continue
        case "${action}" in
        list) printf "%s\n" "${file}" ;;
        exec)
            if [ -x "${file}" ]; then
                "${file}" || { status=$?; common::err "${file} exited with return code ${status}"; }
            fi
            ;;
        esac
    done
}

# common::jq ARGS...: jq, or end with an error when the input is not JSON it can process.
common::jq() {
    jq "$@" 2> /dev/null || common::err "Could not process JSON input"
}

# common::curl ARGS... URL: curl, ending with an error on an HTTP status of 400 or more (except
# the codes listed in CURL_IGNORE).
common::curl() {
    local code status=0 ignored body
    exec {body}>&1  # the body goes to our stdout, the status code into $code
    code=$(curl -o "/proc/self/fd/${body}" -w '%{http_code}' "$@") || status=$?
    exec {body}>&-
    if [ "${code}" -ge 400 ] 2> /dev/null; then
        for ignored in ${CURL_IGNORE-}; do
            [ "${code}" -eq "${ignored}" ] && return 0
        done
        common::err "URL ${*: -1} returned error code: ${code}"
    fi
    return "${status}"
}

# common::debarch ARCH: the Debian name of a machine architecture (x86_64 -> amd64).
common::debarch() {
    case "$1" in
    x86_64)  printf "amd64" ;;
    aarch64) printf "arm64" ;;
    ppc64le) printf "ppc64le" ;;
    *) common::err "Unsupported architecture: $1" ;;
    esac
}
