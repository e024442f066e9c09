"""What shapes a container, as data: files of the image's own, environment variables, mounts,
device nodes, symbolic links, a refresh of the loader cache, and programs to run at a named point
of the start (OCI's hooks). Each built-in hook (identity, localtime, cgroups; NVIDIA, InfiniBand
with its driver libraries, SHARP, Slurm's PMI, the MPI launch agent) and each CDI device
(hooks/cdi.py) is a function from one :class:`StartContext` to one :class:`Edits`;
:mod:`hydria.container.start` applies them in one place (``_apply_edits``), in three rounds: the
root's own (identity, localtime, cgroups) after the system fstab and before the hooks.d scripts,
as enroot's ``10-*`` hooks run before a site's (their context has no container environment yet);
what the hooks.d scripts appended (hooks/scripts.py), right after them; the devices' and the
job's (GPUs, InfiniBand, SHARP, CDI devices, Slurm's PMI, the launch agent) last. Each round in
this order (docs/runtime.md):

0. the folders, then the files, where the root takes them (a read-only unpacked root keeps the
   image's own);
1. device nodes, then the mounts, in the hooks' order (after the system fstab and the hooks.d
   scripts; before the image's fstab, the ``mounts.d`` files and ``--mount``, which may cover them);
2. the symbolic links (in what the mounts brought in), then one refresh of the image's loader cache
   when a hook added libraries;
3. the environment, over the image's and the hooks.d scripts', in the hooks' order (a later hook's
   word wins), under ``--env``: the user's own word wins over every hook's;
4. ``createRuntime`` and ``createContainer`` hooks once every mount is made, before the root
   filesystem turns read-only, with the OCI state on their standard input and a bundle whose
   ``config.json`` names the root filesystem (what vendors' hooks such as ``nvidia-cdi-hook``
   read); ``startContainer`` hooks in the container, after ``pivot_root``, before its program.
"""

from __future__ import annotations

import os

from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import syscalls as sc
from hydria.runtime.fstab import MountEntry
from hydria.runtime.mounts import resolve_in_root

if TYPE_CHECKING:
    import pwd
    from collections.abc import Iterable, Mapping, Sequence

    from hydria.config import Settings

# Hooks run before pivot_root (prestart: OCI's older name of createRuntime) and after it.
EARLY_STAGES = ("prestart", "createRuntime", "createContainer")
LATE_STAGES = ("startContainer",)
DEVICE_BIND = ("rbind", "rw", "nosuid", "noexec", "private")


class DeviceNode(Record):
    path: str  # in the container
    host_path: str
    origin: str  # for messages: the spec file and device
    major: int | None = None  # as the spec has them: checked against the host's node
    minor: int | None = None


class Hook(Record):
    stage: str
    path: str
    args: tuple[str, ...]  # argv, its first word included (the path's when empty)
    env: tuple[str, ...]
    timeout: int | None
    origin: str


class Link(Record):
    path: str  # in the container
    target: str
    origin: str
    # skipped where it cannot be made: its folder is absent (a sysfs class the kernel lacks), or the
    # root does not take it (a read-only unpacked root keeps the image's /etc/localtime)
    optional: bool = False


class File(Record):
    """A file written into the root, over the image's own (never through a link out of the root),
    where the root takes it (a read-only unpacked root keeps the image's)."""

    path: str  # in the container
    content: bytes
    origin: str


class Folder(Record):
    """A folder made in the root where it is missing (with its parents), where the root takes it."""

    path: str  # in the container
    mode: int
    origin: str


class Edits(Record):
    environment: tuple[tuple[str, str | None], ...] = ()  # None: removed (a hooks.d script deleted its line)
    mounts: tuple[MountEntry, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    hooks: tuple[Hook, ...] = ()
    links: tuple[Link, ...] = ()
    libraries: tuple[str, ...] = ()  # what was added for the loader (for messages): its cache is refreshed
    files: tuple[File, ...] = ()
    folders: tuple[Folder, ...] = ()  # made before the files


class StartContext(Record):
    """What a hook may read of the start: the mounted root, the start's private area, the host's
    environment and the container's as it stands before the hooks (empty for the root's own,
    which come first), the settings."""

    root: str
    area: str
    cwd: str
    host: Mapping[str, str]
    container: Mapping[str, str]
    settings: Settings
    user: pwd.struct_passwd  # the host's account of the user who starts the container
    asked: frozenset[str] = frozenset()  # the names that --env set: the user's request, as the host's


def combined(parts: Iterable[Edits]) -> Edits:
    """The edits of ``parts``, in order."""
    fields: list[list[object]] = [[] for _ in Edits._fields]
    for part in parts:
        for collected, values in zip(fields, part):
            collected.extend(values)
    return Edits(*(tuple(values) for values in fields))  # type: ignore[arg-type]


def write_file(root: str, file: File) -> None:
    """Write ``file`` into ``root``; its path resolves inside the root (an image whose
    ``/etc/passwd`` links to a host path gets its own file at ``/etc/passwd``'s target inside).
    Raises OSError or HydriaError (MountFailed) where the root cannot take it."""
    inside = resolve_in_root(root, file.path)
    os.makedirs(os.path.dirname(inside), exist_ok=True)
    with open(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "wb") as handle:
        handle.write(file.content)


def make_folder(root: str, folder: Folder) -> None:
    """Make ``folder`` inside ``root`` where it is missing, with its mode whatever the caller's
    umask (its parents as the umask gives them). Raises OSError or HydriaError (MountFailed)
    where the root cannot take it."""
    inside = resolve_in_root(root, folder.path)
    if os.path.isdir(inside):
        return
    os.makedirs(os.path.dirname(inside), exist_ok=True)
    os.mkdir(inside, folder.mode)
    os.chmod(inside, folder.mode)


def need_own_dev(devices: Sequence[DeviceNode]) -> bool:
    """Whether a device node's container path is missing from the host's ``/dev``, which the
    container shares by default: binding the node there would need a file that the user may not
    make in the host's ``/dev`` (a spec that names a node otherwise than the host, as vendors'
    specs do). The container then gets a ``/dev`` of its own, as podman's always are."""
    return any(node.path.startswith("/dev/") and not os.path.lexists(node.path) for node in devices)


def device_mounts(devices: Sequence[DeviceNode], root: str) -> list[MountEntry]:
    """A user namespace cannot make device nodes: each is the host's node, bound, unless the
    container's ``/dev`` (the host's, by default) shows that node at its path already.

    Raises HydriaError: the node would have to be made in the host's ``/dev``."""
    mounts = []
    for node in devices:
        inside = resolve_in_root(root, node.path)
        try:
            if os.stat(inside).st_rdev == os.stat(node.host_path).st_rdev:
                continue
        except FileNotFoundError:
            if not os.access(os.path.dirname(inside), os.W_OK):
                raise HydriaError(f"device node {node.path} ({node.origin}): the container shares this node's "
                                  f"{os.path.dirname(node.path)}, where {node.path} does not exist",
                                  hint="set HYDRIA_RESTRICT_DEV=y: the container then gets a /dev of its own, in "
                                       "which hydria binds the device under the spec's name") from None
        mounts.append(MountEntry(node.host_path, node.path, "none", ("x-create=file", *DEVICE_BIND),
                                 origin=node.origin))
    return mounts


def environment_over(environment: dict[str, str], edits: Edits, kept: Iterable[str]) -> None:
    """Set (or remove) the edits' variables in ``environment``, except those named in ``kept``
    (``--env``'s)."""
    keep = set(kept)
    for name, value in edits.environment:
        if name in keep:
            continue
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value


def run_hooks(hooks: Sequence[Hook], stages: Sequence[str], state: Mapping[str, object]) -> None:
    """Run the hooks of ``stages`` in order, each with the OCI ``state`` on its standard input,
    only its own environment and the capabilities of the container's user namespace, as OCI
    runtimes (rootless podman's too) run them: ``nvidia-cdi-hook update-ldcache`` makes namespaces
    of its own, ``disable-device-node-modification`` mounts. Raises HydriaError naming the hook's
    spec when one fails, times out or cannot run."""
    import json

    document = json.dumps(dict(state)).encode()
    chosen = [hook for hook in hooks if hook.stage in stages]
    if chosen:
        with sc.AmbientCapabilities("the CDI specs' hooks"):
            for hook in chosen:
                _run_hook(hook, document)


def _run_hook(hook: Hook, document: bytes) -> None:
    import subprocess

    argv = list(hook.args) or [hook.path]
    described = f"{hook.stage} hook {' '.join(argv)} ({hook.origin})"
    try:
        result = subprocess.run(argv, executable=hook.path, input=document, capture_output=True,
                                env=dict(entry.partition("=")[::2] for entry in hook.env),
                                timeout=hook.timeout, check=False)
    except subprocess.TimeoutExpired:
        raise HydriaError(f"the {described} did not end within {hook.timeout} s",
                          hint="the device's vendor tool hangs: check the device and its driver") from None
    except OSError as e:
        raise HydriaError(f"cannot run the {described}: {e.strerror}",
                          hint="install the vendor's tools the CDI spec names, or regenerate the spec") from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout).decode(errors="replace").strip()[-1000:]
        raise HydriaError(f"the {described} failed (exit status {result.returncode})"
                          + (f": {said}" if said else ""),
                          hint="the spec's vendor tool says why; regenerate the spec if the node changed")


def write_bundle(area: str, root: str, environment: Mapping[str, str], command: Sequence[str]) -> dict[str, object]:
    """A minimal OCI bundle in ``area`` (its ``config.json`` names the root filesystem, as hooks
    read it) and the OCI state that hooks get on their standard input."""
    import json

    bundle = os.path.join(area, "bundle")
    os.makedirs(bundle, exist_ok=True)
    config = {"ociVersion": "1.0.2", "root": {"path": root, "readonly": False},
              "process": {"args": list(command), "cwd": "/", "env": [f"{k}={v}" for k, v in environment.items()]},
              "mounts": []}
    with open(os.path.join(bundle, "config.json"), "w") as handle:
        json.dump(config, handle)
    return {"ociVersion": "1.0.2", "id": os.path.basename(area), "status": "created", "pid": os.getpid(),
            "bundle": bundle, "annotations": {}}
