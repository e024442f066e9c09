"""pyxis's ``--container-*`` options: parsing and validation with pyxis's messages. Pure.

The shim passes every occurrence as ``--name[=value]``, in order, so the rules about repeats
(the same value again is fine, a different one is an error) are applied here.
"""

from __future__ import annotations

from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime.fstab import MountEntry

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class OptionError(HydriaError):
    pass


class ShimOption(Record):
    """One of the step options that srun, sbatch and salloc take (``--NAME[=ARG]``). The C shim's
    option table is generated from these when ``install-plugin`` compiles it (slurm/generated.py)."""

    name: str
    arg: str | None  # what the value looks like, for srun --help; None: a flag
    help: str


SHIM_OPTIONS: tuple[ShimOption, ...] = (
    ShimOption("container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH", "the image to run the tasks in"),
    ShimOption("container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]", "bind mounts, FLAGS joined with +"),
    ShimOption("container-workdir", "PATH", "working directory inside the container"),
    ShimOption("container-name", "NAME[:create|exec|no_exec]", "name of the container, kept after the step"),
    ShimOption("container-save", "PATH", "save the container to this squashfs file when the step ends"),
    ShimOption("container-mount-home", None, "bind-mount the user's home directory"),
    ShimOption("no-container-mount-home", None, "do not bind-mount the user's home directory"),
    ShimOption("container-remap-root", None, "appear as root inside the container"),
    ShimOption("no-container-remap-root", None, "do not appear as root inside the container"),
    ShimOption("container-entrypoint", None, "run the image's entrypoint"),
    ShimOption("no-container-entrypoint", None, "do not run the image's entrypoint"),
    ShimOption("container-entrypoint-log", None, "print the output of the entrypoint"),
    ShimOption("container-writable", None, "make the container filesystem writable"),
    ShimOption("container-readonly", None, "make the container filesystem read-only"),
    ShimOption("container-env", "NAME[,NAME...]", "variables whose host value wins over the container's"),
    ShimOption("container-unshare", "NS[,NS...]", "unshare these namespaces: net, ipc, uts"),
    ShimOption("container-device", "VENDOR/CLASS=NAME[,...]", "CDI devices to give the container (hydria cdi list)"),
)
VALUED = tuple(option.name for option in SHIM_OPTIONS if option.arg is not None)
PAIRS = {  # flag -> (setting, value)
    "container-mount-home": ("mount_home", True), "no-container-mount-home": ("mount_home", False),
    "container-remap-root": ("remap_root", True), "no-container-remap-root": ("remap_root", False),
    "container-entrypoint": ("entrypoint", True), "no-container-entrypoint": ("entrypoint", False),
    "container-writable": ("writable", True), "container-readonly": ("writable", False),
}
NAME_FLAGS = ("auto", "create", "exec", "no_exec")
UNSHARE = ("net", "ipc", "uts")
_ENV_DEFAULTS = {"container-image": "IMAGE", "container-mounts": "MOUNTS", "container-workdir": "WORKDIR",
                 "container-name": "NAME", "container-save": "SAVE", "container-env": "ENV",
                 "container-unshare": "UNSHARE", "container-device": "DEVICE"}
_BOOL_DEFAULTS = {"mount_home": "MOUNT_HOME", "remap_root": "REMAP_ROOT", "entrypoint": "ENTRYPOINT",
                  "entrypoint_log": "ENTRYPOINT_LOG"}
TRUE, FALSE = ("1", "true", "yes", "y"), ("0", "false", "no", "n")  # pyxis's booleans, case-sensitive
# A job's defaults of the options: HYDRIA_CONTAINER_IMAGE, ..., else pyxis's PYXIS_CONTAINER_IMAGE, ...
JOB_VARIABLE_PREFIXES = ("HYDRIA_CONTAINER_", "PYXIS_CONTAINER_")


class ContainerOptions:
    """A step's ``--container-*`` options, as :func:`parse` fills them in. A plain class: the
    dataclasses module's imports would cost every step (docs/runtime.md, start latency)."""

    image: str | None = None
    workdir: str | None = None
    name: str | None = None
    name_flag: str = "auto"
    save: str | None = None
    mount_home: bool | None = None
    remap_root: bool | None = None
    entrypoint: bool | None = None
    entrypoint_log: bool = False
    writable: bool | None = None

    def __init__(self) -> None:
        self.mounts: list[MountEntry] = []
        self.env: list[str] = []
        self.unshare: list[str] = []
        self.devices: list[str] = []  # CDI devices (hydria's own option: docs/devices.md)
        self.warnings: list[str] = []

    @property
    def enabled(self) -> bool:
        return self.image is not None or self.name is not None


def parse(args: Sequence[str], environment: Mapping[str, str]) -> ContainerOptions:
    """Options from the shim's arguments, then ``HYDRIA_CONTAINER_*`` (or pyxis's
    ``PYXIS_CONTAINER_*``) defaults from the job's environment for what the command line left
    unset. Raises OptionError."""
    values: dict[str, str] = {}
    flags: dict[str, str] = {}
    for arg in args:
        name, _, value = arg.removeprefix("--").partition("=")
        if name in VALUED:
            if not value:
                raise OptionError(f"--{name}: argument required")
            if values.get(name, value) != value:
                raise OptionError(f"--{name} specified multiple times")
            values[name] = value
        elif name in PAIRS or name == "container-entrypoint-log":
            setting = PAIRS[name][0] if name in PAIRS else "entrypoint_log"
            if flags.get(setting, name) != name:
                raise OptionError(f"both --{flags[setting]} and --{name} were specified")
            flags[setting] = name
        else:
            raise OptionError(f"unknown option: {arg}")
    for name, suffix in _ENV_DEFAULTS.items():
        default = _job_default(environment, suffix)
        if name not in values and default:
            values[name] = default
    options = ContainerOptions()
    for setting, flag in flags.items():
        setattr(options, setting, PAIRS[flag][1] if flag in PAIRS else True)
    for setting, suffix in _BOOL_DEFAULTS.items():
        if setting not in flags:
            default = _job_default(environment, suffix)
            if default in TRUE or default in FALSE:
                setattr(options, setting, default in TRUE)
    if "writable" not in flags:  # as pyxis: a false WRITABLE means read-only, a false READONLY writable
        for suffix, meaning in (("WRITABLE", True), ("READONLY", False)):
            default = _job_default(environment, suffix)
            if options.writable is None and (default in TRUE or default in FALSE):
                options.writable = meaning if default in TRUE else not meaning
    _apply_values(options, values)
    if not options.enabled:
        given: list[str] = [f for f in ("container-mounts", "container-workdir", "container-save", "container-device")
                            if f in values]
        given += [flags[s] for s in flags]
        options.warnings = [f"ignoring --{f} because neither --container-image nor --container-name is set"
                            for f in given]
    return options


def _job_default(environment: Mapping[str, str], suffix: str) -> str:
    """The job's ``HYDRIA_CONTAINER_<suffix>``, else pyxis's ``PYXIS_CONTAINER_<suffix>``."""
    return next((value for prefix in JOB_VARIABLE_PREFIXES if (value := environment.get(prefix + suffix))), "")


def _apply_values(options: ContainerOptions, values: Mapping[str, str]) -> None:
    options.image = values.get("container-image")
    options.workdir = values.get("container-workdir")
    if "container-mounts" in values:
        for entry in values["container-mounts"].split(","):
            mount = mount_entry(entry)
            if mount not in options.mounts:
                options.mounts.append(mount)
    if "container-name" in values:
        name, _, flag = values["container-name"].partition(":")
        if not name:
            raise OptionError("--container-name: empty name")
        if flag and flag not in NAME_FLAGS:
            raise OptionError('--container-name: flag must be "auto", "create", "exec" or "no_exec"')
        options.name, options.name_flag = name, flag or "auto"
    if "container-save" in values:
        if values["container-save"].endswith("/"):
            raise OptionError("--container-save: target is a directory")
        options.save = values["container-save"]
    if "container-env" in values:
        names = values["container-env"].split(",")
        if any(not n for n in names):
            raise OptionError(f"--container-env: invalid format: {values['container-env']}")
        options.env = list(dict.fromkeys(names))
    if "container-device" in values:
        options.devices = device_names(values["container-device"], "--container-device")
    if "container-unshare" in values:
        for namespace in values["container-unshare"].split(","):
            if not namespace:
                raise OptionError("--container-unshare: empty namespace argument")
            if namespace not in UNSHARE:
                raise OptionError(f"--container-unshare: unknown namespace '{namespace}'")
            if namespace not in options.unshare:
                options.unshare.append(namespace)


def device_names(value: str, what: str) -> list[str]:
    """``NAME[,NAME...]`` of CDI devices (the option's, or the plugstack default's)."""
    names = value.split(",")
    if any(not n for n in names):
        raise OptionError(f"{what}: invalid format: {value}")
    return list(dict.fromkeys(names))


def mount_entry(entry: str) -> MountEntry:
    """``SRC:DST[:FLAGS]`` (flags joined with ``+``) or ``SRC`` as an fstab entry, as pyxis builds it."""
    fields = entry.split(":")
    if len(fields) > 3 or (len(fields) > 1 and (not fields[0] or not fields[1])) or not fields[0]:
        raise OptionError(f"--container-mounts: invalid format: {entry}")
    source, target = fields[0], fields[1] if len(fields) > 1 else fields[0]
    extra = tuple(f for f in (fields[2].split("+") if len(fields) == 3 else []) if f)
    if not (source.startswith((".", "/")) or source in ("tmpfs", "umount")):
        raise OptionError('mount source must be a relative path, an absolute path, "tmpfs" or "umount"')
    if not target.startswith((".", "/")):
        raise OptionError("mount target must be a relative path or an absolute path")
    if source == "tmpfs":
        return MountEntry("tmpfs", target, "tmpfs", ("x-create=dir", *extra), origin="--container-mounts")
    if source == "umount":
        return MountEntry("none", target, "none", ("x-detach", *extra), origin="--container-mounts")
    return MountEntry(source, target, "none", ("x-create=auto", "rbind", *extra), origin="--container-mounts")
