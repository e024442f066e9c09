"""Settings: built-in defaults, configuration files and ``HYDRIA_*`` environment variables.

Precedence, lowest first: built-in default, ``$HYDRIA_SYSCONF_PATH/enroot.conf`` and its
``enroot.conf.d/*.conf`` (where a site points hydria at enroot's folder), ``hydria.conf``, its
``hydria.conf.d/*.conf`` in name order, the user's ``$HYDRIA_CONFIG_PATH/hydria.conf``, then a
non-empty ``ENROOT_*`` environment variable (enroot's name), then a non-empty ``HYDRIA_*`` one.
Parsing and resolution are pure; only :func:`load_settings` reads files and the process state.
"""

from __future__ import annotations

import os
import pwd
from types import MappingProxyType

from hydria.digits import is_number
from hydria.errors import ConfigError, did_you_mean
from hydria.expand import ExpansionError, expand
from hydria.paths import listed, read_text, writable_by_others
from hydria.record import TYPE_CHECKING, Record
from hydria.units import SIZE_HINT, parse_size, setting_size

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Literal

    Kind = Literal["path", "bool", "int", "str", "size"]

HYDRIA_PREFIX = "HYDRIA_"
ENROOT_PREFIX = "ENROOT_"
DEFAULT_SYSCONF_PATH = "/etc/hydria"
CONF_FILE = "hydria.conf"
SYSTEM_CONF_FILES = ("enroot.conf", CONF_FILE)  # each with its FILE.d/*.conf after it
COMMAND_TIMEOUT = 30  # seconds a $(command) of a system file may take

# Variables a configuration file may set that are not hydria settings but are handed to the
# programs hydria runs (hooks, registries), as enroot's configuration allows.
_PASSTHROUGH_NAMES = frozenset({"SSL_CERT_DIR", "SSL_CERT_FILE", "all_proxy", "no_proxy", "http_proxy", "https_proxy"})
_PASSTHROUGH_PREFIXES = ("NVIDIA_", "MELLANOX_")
_UPPER_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})
_ENROOT_FALSE = frozenset({"n", "no", "f", "false"})  # enroot reads every other non-empty value as true


class SettingSpec(Record):
    """One setting: its name without the ``HYDRIA_`` prefix, type, default template and meaning."""

    name: str
    kind: Kind
    default: str
    help: str


SPECS: tuple[SettingSpec, ...] = (
    SettingSpec("LIBRARY_PATH", "path", "${HYDRIA_PACKAGE_DIR}/lib", "Shell helpers that hooks may source"),
    SettingSpec("SYSCONF_PATH", "path", DEFAULT_SYSCONF_PATH, "System configuration: hooks.d, mounts.d, environ.d"),
    SettingSpec("RUNTIME_PATH", "path", "${HYDRIA_RUNTIME_DEFAULT}", "Per-start working area (private, 0700)"),
    SettingSpec("CONFIG_PATH", "path", "${XDG_CONFIG_HOME}/hydria", "User configuration: .credentials, hooks.d, mounts.d, environ.d"),
    SettingSpec("CACHE_PATH", "path", "${XDG_CACHE_HOME}/hydria", "Content-addressed blob cache, and the images kept for importing again"),
    SettingSpec("DATA_PATH", "path", "${XDG_DATA_HOME}/hydria", "Named containers"),
    SettingSpec("TEMP_PATH", "path", "${TMPDIR:-/tmp}", "Temporary files of import, load and bundle"),
    SettingSpec("POLICY_PATH", "path", "", "The site's image policy, which images may enter (containers' policy.json format; empty: HYDRIA_SYSCONF_PATH/policy.json where there is one, else every image: docs/security.md)"),
    SettingSpec("STORE_PATH", "path", "", "The image store that every user reads and only its owner writes (empty: none)"),
    SettingSpec("STORE_OWNER", "str", "", "The account that writes the image store (empty: the store directory's owner)"),
    SettingSpec("STORE_PRUNE_ABOVE", "size", "0", "When the image store grows past this size (e.g. 500G), its least recently used images go (0: never on its own)"),
    SettingSpec("STORE_PRUNE_TO", "size", "0", "The size pruning brings the image store down to (0: four fifths of STORE_PRUNE_ABOVE)"),
    SettingSpec("GZIP_PROGRAM", "str", "pigz", "Accepted for enroot configurations; hydria inflates gzip layers itself (ISA-L)"),
    SettingSpec("ZSTD_OPTIONS", "str", "-1", "Accepted for enroot configurations; hydria caches blobs as received, never re-compressed"),
    SettingSpec("SQUASH_OPTIONS", "str", "-comp zstd -Xcompression-level 1", "Compression options of the squashfs images hydria writes"),
    SettingSpec("MAX_PROCESSORS", "int", "${HYDRIA_NPROC}", "Parallelism of squashfs tools and decompression (0: unlimited)"),
    SettingSpec("CACHE_IMAGES", "int", "2", "Registry images each user keeps in the cache, so that importing one again is a hardlink or copy (0: none)"),
    SettingSpec("LAYERED_IMAGES", "bool", "true", "Keep the registry images that Slurm steps import, and builds' base images, as layered images in the cache: each layer squashed once, shared by the images that have it, so that a new version costs its new layers; hydria build -t writes a layered image, so a rebuild costs its changed steps; hydria store import keeps layered images in the image store (n: one image file per image, as enroot)"),
    SettingSpec("MAX_CONNECTIONS", "int", "10", "Concurrent blob downloads (0: unlimited)"),
    SettingSpec("CONNECT_TIMEOUT", "int", "30", "Seconds to wait for a registry connection"),
    SettingSpec("TRANSFER_TIMEOUT", "int", "0", "Seconds a single transfer may take (0: unlimited)"),
    SettingSpec("TRANSFER_RETRIES", "int", "0", "Retries of a failed transfer"),
    SettingSpec("LOGIN_SHELL", "bool", "false", "Start the container command through a login shell (reads /etc/profile)"),
    SettingSpec("ALLOW_SUPERUSER", "bool", "false", "Let real root run without a user namespace, keeping its privileges"),
    SettingSpec("ALLOW_HTTP", "bool", "false", "Allow plain-HTTP registries (insecure)"),
    SettingSpec("ROOTFS_WRITABLE", "bool", "false", "Make the container root filesystem writable (--rw)"),
    SettingSpec("NATIVE_OVERLAYFS", "bool", "true", "Use the kernel overlayfs instead of fuse-overlayfs where possible"),
    SettingSpec("FAST_READER", "bool", "true", "Serve images with hydria's squashfs reader where installed (hydria install-reader), else squashfuse"),
    SettingSpec("READ_CACHE_PATH", "path", "/var/tmp/hydria-unpacked-${UID}", "Node-local folder where an image is unpacked behind a start that runs for a while, so that later starts of it on this node read plain files at the disk's speed (the default is used only where /var/tmp is on a local disk)"),
    SettingSpec("READ_CACHE_SIZE", "size", "40G", "The most your unpacked images may take in READ_CACHE_PATH; the least recently started go first (0: off)"),
    SettingSpec("REMAP_ROOT", "bool", "false", "Map the caller to uid/gid 0 inside the container (--root)"),
    SettingSpec("UNSHARE_NET", "bool", "false", "New network namespace with loopback only (--net)"),
    SettingSpec("UNSHARE_PID", "bool", "false", "New PID namespace (--pid)"),
    SettingSpec("UNSHARE_IPC", "bool", "false", "New IPC namespace, private /dev (--ipc)"),
    SettingSpec("UNSHARE_UTS", "bool", "false", "New UTS namespace (--uts)"),
    SettingSpec("BUNDLE_ALL", "bool", "false", "bundle --all"),
    SettingSpec("BUNDLE_CHECKSUM", "bool", "false", "bundle --checksum"),
    SettingSpec("FORCE_OVERRIDE", "bool", "false", "Implied --force for create, export, load, remove and bundle"),
    SettingSpec("MOUNT_HOME", "bool", "false", "Mount the user's home directory in containers"),
    SettingSpec("RESTRICT_DEV", "bool", "false", "Give containers a minimal /dev instead of the host's"),
    SettingSpec("UNPACK", "bool", "false", "create unpacks images into a directory tree instead of mounting them"),
    SettingSpec("NVIDIA_DRIVER_ROOT", "path", "/", "Tree in which the NVIDIA hook finds the driver (proc, dev, ld.so.cache, utilities)"),
    SettingSpec("RDMA_ROOT", "path", "/", "Tree in which the InfiniBand hook finds the node's /sys and /dev"),
    SettingSpec("CDI_SPEC_DIRS", "str", "/etc/cdi:/var/run/cdi", "Folders of CDI device specs, ':' between; a later one's device replaces an earlier one's"),
    SettingSpec("NVIDIA_CDI", "bool", "false", "Give the GPUs NVIDIA_VISIBLE_DEVICES names from the node's CDI spec of nvidia.com/gpu where there is one, not with the built-in NVIDIA hook"),
    SettingSpec("BUILD_SUBORDINATE_IDS", "bool", "true", "hydria build maps the user's subordinate IDs (/etc/subuid, /etc/subgid) where there are some, so that files keep their owners; false: one ID, every file owned by root"),
    SettingSpec("BUILD_CA_BUNDLE", "path", "", "A PEM file of the certificate authorities that every RUN of hydria build trusts (a site behind a TLS-inspecting proxy: the host's bundle with the site's CA), given to the step's programs by SSL_CERT_FILE and their own variables (empty: the image's own)"),
)
SPEC_BY_NAME: Mapping[str, SettingSpec] = MappingProxyType({s.name: s for s in SPECS})


class Settings(Record):
    """The resolved configuration. ``environment`` holds passthrough variables (NVIDIA_*, proxies);
    ``origins`` says where each setting came from (a file and line, the environment, or default)."""

    library_path: str
    sysconf_path: str
    runtime_path: str
    config_path: str
    cache_path: str
    data_path: str
    temp_path: str
    policy_path: str
    store_path: str
    store_owner: str
    store_prune_above: int
    store_prune_to: int
    gzip_program: str
    zstd_options: str
    squash_options: str
    max_processors: int
    cache_images: int
    layered_images: bool
    max_connections: int
    connect_timeout: int
    transfer_timeout: int
    transfer_retries: int
    login_shell: bool
    allow_superuser: bool
    allow_http: bool
    rootfs_writable: bool
    native_overlayfs: bool
    fast_reader: bool
    read_cache_path: str
    read_cache_size: int
    remap_root: bool
    unshare_net: bool
    unshare_pid: bool
    unshare_ipc: bool
    unshare_uts: bool
    bundle_all: bool
    bundle_checksum: bool
    force_override: bool
    mount_home: bool
    restrict_dev: bool
    unpack: bool
    nvidia_driver_root: str
    rdma_root: str
    cdi_spec_dirs: str
    nvidia_cdi: bool
    build_subordinate_ids: bool
    build_ca_bundle: str
    environment: Mapping[str, str] = MappingProxyType({})
    origins: Mapping[str, str] = MappingProxyType({})

    def as_variables(self) -> dict[str, str]:
        """The settings as ``HYDRIA_NAME=value`` strings, the form hooks and ``info`` show."""
        out = {}
        for spec in SPECS:
            value = getattr(self, spec.name.lower())
            out[HYDRIA_PREFIX + spec.name] = ("y" if value else "n") if spec.kind == "bool" \
                else setting_size(value) if spec.kind == "size" else str(value)
        return out


class Assignment(Record):
    """One ``KEY VALUE`` line of a configuration file, before expansion."""

    key: str
    value: str
    literal: bool  # single-quoted: no expansion
    origin: str  # "FILE:LINE"
    commands: bool = False  # $(command) runs: a system file that only root can write
    enroot_name: bool = False  # written as ENROOT_NAME: enroot's meaning of a value is expected


# Patterns as text: ``re`` is imported only where a configuration file is read (a start without
# one is spared its import, see docs/runtime.md).
_LINE = r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*=[ \t]*|[ \t]+)(?P<value>.*)$"


def parse_conf(text: str, source: str, *, commands: bool = False,
               problems: list[ConfigError] | None = None) -> list[Assignment]:
    """Parse a configuration file: ``KEY VALUE`` or ``KEY=VALUE`` lines, ``#`` comments.

    ``ENROOT_*`` keys are accepted as the ``HYDRIA_*`` setting of the same name, so an
    ``enroot.conf`` can be reused as it is; with ``commands``, its values may run ``$(command)``.
    With ``problems``, a bad line is added there and left out instead of raised.

    Raises:
        ConfigError: a line that is not an assignment, or names no known setting.
    """
    result = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            result.append(_assignment(line, f"{source}:{number}", commands))
        except ConfigError as e:
            if problems is None:
                raise
            problems.append(e)
    return result


def _assignment(line: str, origin: str, commands: bool) -> Assignment:
    """One line of a configuration file (not empty, no comment). Raises ConfigError."""
    import re

    if line.startswith("export "):
        raise ConfigError(f"Invalid configuration file: {origin}: {line!r} is a shell command",
                          hint=f"write {line.removeprefix('export ').strip()} without 'export': the file holds "
                               "settings, it is not run as a shell script")
    match = re.match(_LINE, line)
    if not match:
        raise ConfigError(
            f"Invalid configuration file: {origin}: expected 'HYDRIA_NAME value', got {line!r}",
            hint="each line sets one setting; comments start with '#'",
        )
    key = match["key"]
    enroot_name = key.startswith(ENROOT_PREFIX)
    if enroot_name:
        key = HYDRIA_PREFIX + key[len(ENROOT_PREFIX):]
    if key.startswith(HYDRIA_PREFIX):
        if key[len(HYDRIA_PREFIX):] not in SPEC_BY_NAME:
            raise ConfigError(f"Invalid configuration file: {origin}: unknown setting {match['key']}",
                              hint=_setting_hint(match["key"]))
    elif not _is_passthrough(key):
        raise ConfigError(
            f"Invalid configuration file: {origin}: {key} is not a hydria setting",
            hint="only HYDRIA_* settings, NVIDIA_*, MELLANOX_*, SSL_CERT_* and proxy variables may be set here",
        )
    value, literal = _unquote(match["value"], origin)
    return Assignment(key, value, literal, origin, commands, enroot_name)


def _setting_hint(written: str) -> str:
    """"did you mean HYDRIA_DATA_PATH?" for a misspelled setting, in the prefix it was written with."""
    prefix = ENROOT_PREFIX if written.startswith(ENROOT_PREFIX) else HYDRIA_PREFIX
    meant = did_you_mean(written[len(prefix):], SPEC_BY_NAME, "hydria info lists the settings", cutoff=0.7)
    return meant.replace("mean ", f"mean {prefix}", 1) if meant else \
        "hydria info lists the settings, and docs/configuration.md says what each does"


def _unquote(value: str, origin: str) -> tuple[str, bool]:
    """Strip one pair of quotes; a ``#`` after whitespace in an unquoted value starts a comment."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        end = value.find(quote, 1)
        rest = value[end + 1:].strip() if end > 0 else None
        if end < 0 or rest and not rest.startswith("#"):
            raise ConfigError(f"Invalid configuration file: {origin}: unbalanced quotes in {value!r}")
        return value[1:end], quote == "'"
    import re

    return re.split(r"[ \t]+#", value, maxsplit=1)[0].strip(), False


def _is_passthrough(key: str) -> bool:
    """NVIDIA_*, MELLANOX_* (capitals, digits, _), SSL_CERT_DIR/FILE or a proxy variable."""
    if key in _PASSTHROUGH_NAMES:
        return True
    prefix = next((p for p in _PASSTHROUGH_PREFIXES if key.startswith(p)), None)
    rest = key[len(prefix):] if prefix else ""
    return bool(rest) and all(c in _UPPER_NAME_CHARACTERS for c in rest)


class Context(Record):
    """Facts about the process that defaults and expansion depend on."""

    uid: int
    user: str
    home: str
    hostname: str
    nproc: int
    package_dir: str
    runtime_default: str


def resolve(
    layers: Iterable[Iterable[Assignment]], env: Mapping[str, str], context: Context,
    overrides: Sequence[Assignment] = (), problems: list[ConfigError] | None = None,
) -> Settings:
    """Merge defaults, configuration layers (lowest precedence first), the environment and
    ``overrides`` (a configuration script's directives, which win over the environment). With
    ``problems``, a value that does not fit is added there and its setting keeps its default.

    Raises:
        ConfigError: a value that does not expand or does not fit its setting's type.
    """
    chosen: dict[str, Assignment] = {}
    for layer in layers:
        for assignment in layer:
            chosen[assignment.key] = assignment
    for key, value in sorted(env.items(), key=lambda item: not item[0].startswith(ENROOT_PREFIX)):
        # ENROOT_X first, so that HYDRIA_X wins: enroot users' exported switches and the paths
        # that sites' module files set keep working.
        if key.startswith(ENROOT_PREFIX):
            spec = SPEC_BY_NAME.get(key[len(ENROOT_PREFIX):])
            if value and spec is not None:
                chosen[HYDRIA_PREFIX + spec.name] = Assignment(HYDRIA_PREFIX + spec.name, value, True,
                                                               f"environment variable {key}", enroot_name=True)
        elif value and (key.startswith(HYDRIA_PREFIX) and key[len(HYDRIA_PREFIX):] in SPEC_BY_NAME or _is_passthrough(key)):
            chosen[key] = Assignment(key, value, True, f"environment variable {key}")
    for assignment in overrides:
        chosen[assignment.key] = assignment

    variables = _variables(env, context)
    values: dict[str, object] = {}
    origins: dict[str, str] = {}
    for spec in SPECS:
        key = HYDRIA_PREFIX + spec.name
        assignment = chosen.get(key) or Assignment(key, spec.default, False, "default")
        try:
            values[spec.name.lower()] = _convert(spec, assignment, variables)
        except ConfigError as e:
            if problems is None:
                raise
            problems.append(e)
            assignment = Assignment(key, spec.default, False, "default")
            values[spec.name.lower()] = _convert(spec, assignment, variables)
        origins[key] = assignment.origin
    environment = {}
    for key, assignment in chosen.items():
        if not key.startswith(HYDRIA_PREFIX):
            try:
                environment[key] = _expand(assignment, variables)
            except ConfigError as e:
                if problems is None:
                    raise
                problems.append(e)
                continue
            origins[key] = assignment.origin
    return Settings(**values, environment=MappingProxyType(environment), origins=MappingProxyType(origins))  # type: ignore[arg-type]


def _variables(env: Mapping[str, str], context: Context) -> dict[str, str]:
    """What ``$NAME`` may refer to: the environment plus identity, XDG defaults and internals."""
    variables = dict(env)
    # The process's own, never the environment's: Slurm gives every task of an sbatch job the batch
    # host's HOSTNAME, and "/local/$HOSTNAME" must name the node the task runs on.
    variables["UID"] = variables["EUID"] = str(context.uid)
    variables["HOSTNAME"] = context.hostname
    variables.setdefault("USER", context.user)
    if not variables.get("HOME"):
        variables["HOME"] = context.home
    for name, default in (("XDG_DATA_HOME", "/.local/share"), ("XDG_CONFIG_HOME", "/.config"),
                          ("XDG_CACHE_HOME", "/.cache")):
        if not variables.get(name):
            variables[name] = variables["HOME"] + default
    if not variables.get("XDG_RUNTIME_DIR"):
        # enroot.conf's "${XDG_RUNTIME_DIR}/enroot" on a compute node without a login session: the
        # folder that holds hydria's default runtime path (/run/user/UID, /run for root), else
        # that per-user path itself (never a folder that all users share).
        default = expand(context.runtime_default, variables)
        variables["XDG_RUNTIME_DIR"] = os.path.dirname(default) if default.endswith("/hydria") else default
    variables["HYDRIA_PACKAGE_DIR"] = context.package_dir
    variables["HYDRIA_NPROC"] = str(context.nproc)
    variables["HYDRIA_RUNTIME_DEFAULT"] = expand(context.runtime_default, variables)
    return variables


def _expand(assignment: Assignment, variables: Mapping[str, str]) -> str:
    if assignment.literal:
        return assignment.value
    try:
        return expand(assignment.value, variables,
                      (lambda command: _command_output(command, variables)) if assignment.commands else None)
    except ExpansionError as e:
        raise ConfigError(f"Invalid configuration: {assignment.origin}: {assignment.key}: {e}") from None


_COMMAND_OUTPUTS: dict[str, str] = {}  # each $(command) runs once per process, however often settings load


def _command_output(command: str, variables: Mapping[str, str]) -> str:
    """The output of a ``$(command)`` of a system file, run by ``/bin/sh`` with ``variables`` as
    its environment (enroot runs them through ``eval echo``). Raises ExpansionError."""
    if command not in _COMMAND_OUTPUTS:
        _COMMAND_OUTPUTS[command] = _run_command(command, variables)
    return _COMMAND_OUTPUTS[command]


def _run_command(command: str, variables: Mapping[str, str]) -> str:
    import subprocess  # here: only a configuration that uses $(...) pays for it

    try:
        result = subprocess.run(["/bin/sh", "-c", command], env=dict(variables), stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, errors="surrogateescape",
                                timeout=COMMAND_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise ExpansionError(f"$({command}) did not finish within {COMMAND_TIMEOUT} s") from None
    except OSError as e:
        raise ExpansionError(f"cannot run $({command}): {e.strerror}") from None
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
        raise ExpansionError(f"$({command}) failed: {detail[0]}")
    return result.stdout


def _convert(spec: SettingSpec, assignment: Assignment, variables: Mapping[str, str]) -> object:
    text = _expand(assignment, variables)
    written = ENROOT_PREFIX + spec.name if assignment.enroot_name else assignment.key  # the name the user gave
    named = assignment.origin.endswith((f" {written}", f" #{written}={assignment.value}"))
    where = assignment.origin if named else f"{assignment.origin}: {written}"
    if spec.kind == "bool":
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            if assignment.enroot_name and lowered not in _ENROOT_FALSE:
                _warn_once(f"{where}: {text!r} is false to hydria but true to enroot (only n, no, f and false are "
                           "false to enroot): write n or y to mean the same to both")
            return False
        raise ConfigError(f"Invalid configuration: {where}: {text!r} is not a boolean",
                          hint="use y/yes/true/on/1 or n/no/false/off/0")
    if spec.kind == "size":
        size = parse_size(text)
        if size is None:
            raise ConfigError(f"Invalid configuration: {where}: {text!r} is not a size", hint=SIZE_HINT)
        return size
    if spec.kind == "int":
        if not is_number(text.strip()):
            raise ConfigError(f"Invalid configuration: {where}: {text!r} is not a non-negative integer",
                              hint="a whole number of 0 or more, e.g. 4")
        return int(text)
    if spec.kind == "path":
        if not text and not spec.default:  # a path that may be unset (STORE_PATH)
            return ""
        if not text.startswith("/"):
            raise ConfigError(f"Invalid configuration: {where}: {text!r} is not an absolute path",
                              hint="paths may use $HOME, $UID, $USER, $HOSTNAME and ${XDG_*_HOME}")
        return os.path.normpath(text)
    return text


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning about the configuration, once per process however often it is read."""
    if message not in _warned:
        _warned.add(message)
        from hydria.log import Logger

        Logger(__name__).warning("%s", message)


def current_context(env: Mapping[str, str]) -> Context:
    """Read the facts about this process that defaults need."""
    uid = os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
        user, home = entry.pw_name, entry.pw_dir
    except KeyError:
        user, home = str(uid), "/"
    return Context(
        uid=uid,
        user=env.get("USER") or user,
        home=home,
        hostname=os.uname().nodename,
        nproc=len(os.sched_getaffinity(0)),
        package_dir=os.path.dirname(os.path.abspath(__file__)),
        runtime_default=_runtime_default(uid, env),
    )


def _runtime_default(uid: int, env: Mapping[str, str]) -> str:
    """``$XDG_RUNTIME_DIR/hydria``; without it, ``/run/user/UID/hydria`` when that exists,
    ``/run/hydria`` for root, else a per-user directory under ``$TMPDIR`` (compute nodes often
    have no login session, and an ordinary user cannot create ``/run/hydria``). Another user can
    make that name first in a shared ``/tmp``, which would stop every start: then one in the
    user's cache folder (a start only mounts its private tmpfs there, whatever file system it is)."""
    if env.get("XDG_RUNTIME_DIR"):
        return "${XDG_RUNTIME_DIR}/hydria"
    if os.path.isdir(f"/run/user/{uid}"):
        return f"/run/user/{uid}/hydria"
    if uid == 0:
        return "/run/hydria"
    try:
        squatted = os.lstat(f"{env.get('TMPDIR') or '/tmp'}/hydria-runtime-{uid}").st_uid != uid
    except OSError:
        squatted = False
    return "${XDG_CACHE_HOME}/hydria/runtime" if squatted else "${TMPDIR:-/tmp}/hydria-runtime-${UID}"


# Settings that protect the site: for a Slurm step only the administrator's files set them, not
# the job's environment nor the user's hydria.conf (docs/slurm.md, "What a job may set").
SITE_SETTINGS = frozenset({"ALLOW_HTTP", "ALLOW_SUPERUSER", "RESTRICT_DEV", "NVIDIA_DRIVER_ROOT", "RDMA_ROOT",
                           "CDI_SPEC_DIRS", "NVIDIA_CDI", "STORE_OWNER", *(spec.name for spec in SPECS if spec.name.endswith("_PATH"))})


def job_environment(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``env`` without the site settings (under ``HYDRIA_`` and ``ENROOT_`` names), and the names
    taken out."""
    removed = sorted(key for key in env if key.startswith((HYDRIA_PREFIX, ENROOT_PREFIX))
                     and key.split("_", 1)[1] in SITE_SETTINGS)
    return {key: value for key, value in env.items() if key not in removed}, removed


def load_settings(env: Mapping[str, str] | None = None, *, site_only: frozenset[str] = frozenset(),
                  overrides: Sequence[Assignment] = (), problems: list[ConfigError] | None = None) -> Settings:
    """Load the settings of this process from the configuration files, the environment and
    ``overrides`` (see resolve); ``site_only`` settings come from the system files alone (not
    from the user's file). With ``problems`` (``hydria info``), what is wrong in them is added
    there and left out, instead of raised.

    Raises:
        ConfigError: an unreadable or invalid configuration file, or an invalid value.
    """
    env = os.environ if env is None else env
    context = current_context(env)
    sysconf = env.get(HYDRIA_PREFIX + "SYSCONF_PATH") or env.get(ENROOT_PREFIX + "SYSCONF_PATH") or DEFAULT_SYSCONF_PATH
    system_files = [path for name in SYSTEM_CONF_FILES for path in
                    (os.path.join(sysconf, name), *listed(os.path.join(sysconf, name + ".d"), ".conf"))]
    system_layers = [parse_conf(text, path, commands="$(" in text and only_root_can_write(path), problems=problems)
                     for path in system_files if (text := _read(path, problems)) is not None]
    # The user's file lives in CONFIG_PATH, which the system files or the environment may move.
    config_path = resolve(system_layers, env, context, overrides, [] if problems is not None else None).config_path
    user_file = os.path.join(config_path, CONF_FILE)
    user_text = _read(user_file, problems)
    user_layers = [[assignment for assignment in parse_conf(user_text, user_file, problems=problems)
                    if assignment.key[len(HYDRIA_PREFIX):] not in site_only]] if user_text is not None else []
    return resolve([*system_layers, *user_layers], env, context, overrides, problems)


ROOT_ONLY = frozenset({0})


def only_root_can_write(path: str) -> bool:
    """Whether only root can change ``path`` (links resolved): the rule of
    :func:`hydria.paths.writable_by_others`, which the image store follows too."""
    return writable_by_others(path, ROOT_ONLY) is None


def _read(path: str, problems: list[ConfigError] | None = None) -> str | None:
    try:
        return read_text(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        error = ConfigError(f"Invalid configuration file: {path}: cannot read it: {e}",
                            hint="make it readable by every user that runs hydria")
        if problems is None:
            raise error from None
        problems.append(error)
        return None

