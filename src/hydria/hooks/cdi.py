"""Devices described by the Container Device Interface (CDI): the specs that device vendors'
tools write (``nvidia-ctk cdi generate``, AMD's and Intel's generators) in ``/etc/cdi`` and
``/var/run/cdi`` (``HYDRIA_CDI_SPEC_DIRS``), JSON or YAML, become edits of a container
(:mod:`hydria.runtime.edits`) for ``--device VENDOR/CLASS=NAME`` (docs/devices.md).

As CDI's own library: a later folder takes precedence over an earlier one for a device that
both define; two specs of one folder that define one device make it unusable (an error naming
both); a spec that is not valid is left out, and said so when one of its devices is asked for.
So is a spec that others than root and the user could change (hydria/paths.py's one rule): its
hooks run as whoever asks for its devices.
Fields of the spec that hydria cannot carry out unprivileged (``additionalGids``, ``intelRdt``,
``netDevices``, ``poststart`` and ``poststop`` hooks) are errors when a device that uses them is
asked for, never ignored.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hydria.errors import HydriaError
from hydria.paths import writable_by_others
from hydria.runtime.edits import DeviceNode, Edits, Hook, combined
from hydria.runtime.fstab import FLAGS, IGNORED, PROPAGATION, MountEntry

# The kind's vendor is a DNS subdomain; its class and the device names as CDI's validation has them.
_VENDOR = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_CLASS = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
NEWEST_MAJOR = 1  # spec versions 0.3.0 to 1.x
MAX_SPEC_SIZE = 16 << 20  # bytes: NVIDIA's spec of an 8-GPU node with MIG is well under 1 MiB
STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
UNSUPPORTED_STAGES = ("poststart", "poststop")
_SPEC_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_KEYS = {"name", "annotations", "containerEdits"}
_EDIT_KEYS = {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"}
_NODE_KEYS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
_MOUNT_KEYS = {"hostPath", "containerPath", "type", "options"}
_HOOK_KEYS = {"hookName", "path", "args", "env", "timeout"}
_MOUNT_OPTIONS = frozenset(FLAGS) | frozenset(PROPAGATION) | IGNORED


class CdiError(HydriaError):
    """A spec that is not valid, or a device that cannot be given."""


@dataclass
class Spec:
    path: str
    priority: int  # the folder's place in HYDRIA_CDI_SPEC_DIRS: later ones take precedence
    kind: str
    version: str
    edits: dict[str, Any]
    devices: dict[str, dict[str, Any]]  # name -> containerEdits


@dataclass
class Registry:
    """Every device of the specs found: ``devices`` by qualified name, and what went wrong."""

    devices: dict[str, tuple[Spec, dict[str, Any]]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # spec path -> why it is left out (naming the path)
    conflicts: dict[str, list[str]] = field(default_factory=dict)  # device -> the specs defining it

    def kinds(self) -> set[str]:
        return {name.partition("=")[0] for name in self.devices}


def spec_dirs(setting: str) -> list[str]:
    return [folder for folder in setting.split(":") if folder]


def load(dirs: Sequence[str]) -> Registry:
    """The specs of ``dirs`` (``*.json``, ``*.yaml``, ``*.yml``, in name order)."""
    registry = Registry()
    for priority, folder in enumerate(dirs):
        try:
            names = sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            registry.invalid[folder] = f"{folder}: cannot read the folder: {e.strerror}"
            continue
        found: dict[str, list[tuple[Spec, dict[str, Any]]]] = {}  # device -> its definitions in this folder
        for name in names:
            if not name.endswith((".json", ".yaml", ".yml")):
                continue
            path = os.path.join(folder, name)
            exposed = writable_by_others(path, frozenset({0, os.geteuid()}))
            if exposed is not None:  # its hooks would run as every user who asks for its devices
                registry.invalid[path] = f"{path}: {exposed} can be changed by others than root and you: not read"
                continue
            try:
                spec = read_spec(path, priority)
            except CdiError as e:
                registry.invalid[path] = e.message
                continue
            for device, edits in spec.devices.items():
                found.setdefault(f"{spec.kind}={device}", []).append((spec, edits))
        for qualified, definitions in found.items():  # a later folder's replace an earlier one's
            registry.devices.pop(qualified, None)
            registry.conflicts.pop(qualified, None)
            if len(definitions) > 1:
                registry.conflicts[qualified] = [spec.path for spec, _ in definitions]
            else:
                registry.devices[qualified] = definitions[0]
    return registry


def read_spec(path: str, priority: int = 0) -> Spec:
    """Raises CdiError: the file cannot be read or parsed, or is not a valid CDI spec."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO would never answer
    except OSError as e:
        raise CdiError(f"{path}: cannot read it: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CdiError(f"{path}: not a regular file")
        data = os.read(fd, MAX_SPEC_SIZE + 1)
    except OSError as e:
        raise CdiError(f"{path}: cannot read it: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_SIZE:
        raise CdiError(f"{path}: larger than {MAX_SPEC_SIZE >> 20} MiB, which no device's spec needs")
    try:
        document = json.loads(data) if path.endswith(".json") else _yaml(data)
    except ValueError as e:
        raise CdiError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}: {e}") from None
    return validate(document, path, priority)


def _yaml(data: bytes) -> object:
    try:
        import yaml
    except ImportError:  # a bundle's runtime on a host whose Python has no PyYAML
        raise ValueError("reading YAML needs PyYAML, which this Python lacks (Debian: python3-yaml; or "
                         "ask the vendor's tool for JSON)") from None

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(data, Loader=loader)
    except yaml.YAMLError as e:
        raise ValueError(str(e).replace("\n", " ")) from None


def validate(document: object, path: str, priority: int = 0) -> Spec:
    """The spec in ``document``, checked as CDI's schema has it. Raises CdiError naming the field."""
    spec = _mapping(document, path, _SPEC_KEYS, "the spec")
    version = _string(spec.get("cdiVersion"), path, "cdiVersion")
    match = _VERSION.fullmatch(version)
    if match is None or int(match.group(1)) > NEWEST_MAJOR:
        raise CdiError(f"{path}: cdiVersion {version!r} is not a version this hydria reads (0.3.0 to {NEWEST_MAJOR}.x)")
    kind = _string(spec.get("kind"), path, "kind")
    vendor, slash, device_class = kind.partition("/")
    if not slash or not _VENDOR.fullmatch(vendor) or len(vendor) > 253 or not _CLASS.fullmatch(device_class):
        raise CdiError(f"{path}: kind {kind!r} is not VENDOR/CLASS (e.g. nvidia.com/gpu)")
    edits = _edits(spec.get("containerEdits", {}), path, "containerEdits")
    devices_field = spec.get("devices")
    if not isinstance(devices_field, list) or not devices_field:
        raise CdiError(f"{path}: devices must be a list of at least one device")
    devices: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(devices_field):
        where = f"devices[{index}]"
        device = _mapping(entry, path, _DEVICE_KEYS, where)
        name = _string(device.get("name"), path, f"{where}.name")
        if not _NAME.fullmatch(name):
            raise CdiError(f"{path}: {where}: device name {name!r} must start and end with a letter or digit "
                           "(letters, digits, '_', '-', '.', ':' between)")
        if name in devices:
            raise CdiError(f"{path}: device {name!r} is defined twice")
        devices[name] = _edits(device.get("containerEdits", {}), path, f"{where}.containerEdits")
    return Spec(path, priority, kind, version, edits, devices)


def _edits(value: object, path: str, where: str) -> dict[str, Any]:
    edits = _mapping(value, path, _EDIT_KEYS, where)
    for entry in _list(edits.get("env", []), path, f"{where}.env"):
        if not isinstance(entry, str) or "=" not in entry or entry.startswith("="):
            raise CdiError(f"{path}: {where}.env: {entry!r} is not NAME=VALUE")
    for index, node in enumerate(_list(edits.get("deviceNodes", []), path, f"{where}.deviceNodes")):
        node = _mapping(node, path, _NODE_KEYS, f"{where}.deviceNodes[{index}]")
        _absolute(node.get("path"), path, f"{where}.deviceNodes[{index}].path")
        if "hostPath" in node:
            _absolute(node["hostPath"], path, f"{where}.deviceNodes[{index}].hostPath")
        for key in ("major", "minor", "fileMode", "uid", "gid"):
            if key in node and (not isinstance(node[key], int) or isinstance(node[key], bool)):
                raise CdiError(f"{path}: {where}.deviceNodes[{index}].{key} must be an integer")
        if node.get("type", "c") not in ("c", "b", "u", "p"):
            raise CdiError(f"{path}: {where}.deviceNodes[{index}].type {node['type']!r} is none of c, b, u, p")
    for index, mount in enumerate(_list(edits.get("mounts", []), path, f"{where}.mounts")):
        mount = _mapping(mount, path, _MOUNT_KEYS, f"{where}.mounts[{index}]")
        _string(mount.get("hostPath"), path, f"{where}.mounts[{index}].hostPath")
        _absolute(mount.get("containerPath"), path, f"{where}.mounts[{index}].containerPath")
        for option in _list(mount.get("options", []), path, f"{where}.mounts[{index}].options"):
            _string(option, path, f"{where}.mounts[{index}].options")
    for index, hook in enumerate(_list(edits.get("hooks", []), path, f"{where}.hooks")):
        hook = _mapping(hook, path, _HOOK_KEYS, f"{where}.hooks[{index}]")
        stage = _string(hook.get("hookName"), path, f"{where}.hooks[{index}].hookName")
        if stage not in STAGES:
            raise CdiError(f"{path}: {where}.hooks[{index}]: hookName {stage!r} is none of {', '.join(STAGES)}")
        _absolute(hook.get("path"), path, f"{where}.hooks[{index}].path")
        for key in ("args", "env"):
            for word in _list(hook.get(key, []), path, f"{where}.hooks[{index}].{key}"):
                _string(word, path, f"{where}.hooks[{index}].{key}")
        timeout = hook.get("timeout")
        if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0):
            raise CdiError(f"{path}: {where}.hooks[{index}].timeout must be a number of seconds above 0")
    return edits


def _mapping(value: object, path: str, keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CdiError(f"{path}: {where} must be a mapping")
    unknown = sorted(str(key) for key in value if key not in keys)
    if unknown:
        raise CdiError(f"{path}: {where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(keys))})")
    return value


def _list(value: object, path: str, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CdiError(f"{path}: {where} must be a list")
    return value


def _string(value: object, path: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise CdiError(f"{path}: {where} must be a non-empty string")
    return value


def _absolute(value: object, path: str, where: str) -> str:
    text = _string(value, path, where)
    if not text.startswith("/"):
        raise CdiError(f"{path}: {where}: {text!r} must be an absolute path")
    return text


# --- devices asked for -> edits ---------------------------------------------------------------

def edits_for(requested: Iterable[str], registry: Registry) -> Edits:
    """The edits of the devices ``requested`` (``VENDOR/CLASS=NAME``; ``=all`` is the spec's own
    device of that name, else every device of the kind): each spec's common edits once, then
    each device's. Raises CdiError for a device that is not there or cannot be given here."""
    chosen: list[tuple[str, Spec, dict[str, Any]]] = []
    for name in requested:
        for qualified in _expand(name, registry):
            if qualified not in (q for q, _, _ in chosen):
                chosen.append((qualified, *registry.devices[qualified]))
    parts: list[Edits] = []
    used: list[str] = []
    for qualified, spec, device_edits in chosen:
        if spec.path not in used:
            used.append(spec.path)
            parts.append(_to_edits(spec.edits, f"{spec.path}, {spec.kind}"))
        parts.append(_to_edits(device_edits, f"{spec.path}, {qualified}"))
    return combined(parts)


def _expand(name: str, registry: Registry) -> list[str]:
    kind, equals, device = name.partition("=")
    vendor, slash, device_class = kind.partition("/")
    if not (equals and slash and _VENDOR.fullmatch(vendor) and _CLASS.fullmatch(device_class)
            and _NAME.fullmatch(device)):
        raise CdiError(f"not a CDI device name: {name}",
                       hint="VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0 or nvidia.com/gpu=all; hydria cdi list shows them")
    if name in registry.devices:
        return [name]
    if name in registry.conflicts:
        raise CdiError(f"CDI device {name} is defined by more than one spec of one folder: "
                       f"{', '.join(registry.conflicts[name])}",
                       hint="the administrator removes one of them (specs of a later folder replace an earlier one's)")
    if device == "all":
        every = sorted(q for q in registry.devices if q.partition("=")[0] == kind)
        if every:
            return every
    known = sorted(q for q in registry.devices if q.partition("=")[0] == kind)
    invalid = "; ".join(registry.invalid.values())
    hint = f"this node has {', '.join(known)}" if known else \
        (f"no spec of {kind} on this node" + (f" (left out: {invalid})" if invalid else "")
         + ": the vendor's tool writes one (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)")
    raise CdiError(f"no such CDI device: {name}", hint=f"{hint}; hydria cdi list shows them")


def _to_edits(edits: Mapping[str, Any], origin: str) -> Edits:
    for key, what in (("intelRdt", "Intel RDT settings"), ("netDevices", "network devices")):
        if edits.get(key):
            raise CdiError(f"{origin}: the spec asks for {what} ({key}), which need root: hydria's containers "
                           "are unprivileged", hint="ask for a device without them, or run it with a root runtime")
    if any(gid for gid in edits.get("additionalGids") or []):
        raise CdiError(f"{origin}: the spec adds groups (additionalGids), which a user namespace cannot map",
                       hint="the processes keep the user's own groups: drop additionalGids from the spec "
                            "if those groups already give access")
    environment = tuple((entry.partition("=")[0], entry.partition("=")[2]) for entry in edits.get("env") or [])
    devices = tuple(DeviceNode(node["path"], node.get("hostPath") or node["path"], origin, node.get("major"),
                               node.get("minor")) for node in edits.get("deviceNodes") or [])
    mounts = tuple(_mount(mount, origin) for mount in edits.get("mounts") or [])
    hooks = []
    for hook in edits.get("hooks") or []:
        if hook["hookName"] in UNSUPPORTED_STAGES:
            raise CdiError(f"{origin}: a {hook['hookName']} hook ({hook['path']}): hydria runs the container's "
                           "program in its own place, so nothing runs after it starts",
                           hint="ask for a device without such hooks")
        hooks.append(Hook(hook["hookName"], hook["path"], tuple(hook.get("args") or ()), tuple(hook.get("env") or ()),
                          hook.get("timeout"), origin))
    return Edits(environment, mounts, devices, tuple(hooks))


def _mount(mount: Mapping[str, Any], origin: str) -> MountEntry:
    options = tuple(mount.get("options") or ())
    fstype = mount.get("type") or "none"
    bind = "bind" in options or "rbind" in options or fstype in ("none", "bind")
    if bind:
        unknown = [option for option in options if option not in _MOUNT_OPTIONS]
        if unknown:
            raise CdiError(f"{origin}: mount of {mount['hostPath']}: option {unknown[0]!r} is no bind-mount option")
        create = "x-create=dir" if os.path.isdir(mount["hostPath"]) else "x-create=file"
        return MountEntry(mount["hostPath"], mount["containerPath"], "none",
                          (create, *options, *(() if "bind" in options or "rbind" in options else ("rbind",))),
                          origin=origin)
    return MountEntry(mount["hostPath"], mount["containerPath"], fstype, ("x-create=dir", *options), origin=origin)


def check_devices(devices: Sequence[DeviceNode]) -> None:
    """Each device node's host node: there, and a device. Raises CdiError (before the start)."""
    for node in devices:
        try:
            info = os.stat(node.host_path)
        except OSError as e:
            raise CdiError(f"{node.origin}: device node {node.host_path}: {e.strerror}",
                           hint="the device or its driver is missing on this node; regenerate the spec if it changed") from None
        if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
            raise CdiError(f"{node.origin}: {node.host_path} is not a device node",
                           hint="the spec's deviceNodes name device files (/dev/...)")
        actual = (os.major(info.st_rdev), os.minor(info.st_rdev))
        expected = (node.major if node.major is not None else actual[0], node.minor if node.minor is not None else actual[1])
        if actual != expected:
            raise CdiError(f"{node.origin}: {node.host_path} is device {actual[0]}:{actual[1]}, the spec says "
                           f"{expected[0]}:{expected[1]}", hint="the spec is out of date: the vendor's tool writes it anew")
