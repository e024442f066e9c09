"""``hydria doctor``: check that a node (or every node of a Slurm allocation) can run hydria
containers, and say how to fix what cannot.

Each check gives ``ok``, ``warn`` (works, with a limit), ``fail`` (containers will not start, or a
feature is broken) or ``skip`` (not applicable here: no Slurm, no GPU), with a detail and, unless
ok, a fix. The checks run as the calling user, with that user's settings, and change nothing
outside a temporary directory they remove.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from hydria import apparmor
from hydria.config import Settings
from hydria.container import read_cache
from hydria.digits import is_number
from hydria.errors import HydriaError, MissingTool
from hydria.image.blobs import layout as cachelayout
from hydria.paths import hydria_command, private_dir_problem, temp_folder, user_name
from hydria.record import Record
from hydria.runtime.filesystems import file_system_type
from hydria.runtime.reader import (
    FALLBACK,
    WITHOUT_FUSE,
    installed_reader,
    reader_path,
    squashfs_server,
)
from hydria.tools import run_tool
from hydria.trees import delete_tree
from hydria.units import format_size

# program, Debian package, needed for what (None: optional)
TOOLS = (
    ("squashfuse", "squashfuse", None),  # needed where hydria's reader is not: the "image reader" check
    ("tar2sqfs", "squashfs-tools-ng", "import"),
    ("mksquashfs", "squashfs-tools", "export and --container-save"),
    ("unsquashfs", "squashfs-tools", "create --unpack"),
    ("sqfs2tar", "squashfs-tools-ng", "bundle"),
    ("fuse-overlayfs", "fuse-overlayfs", None),
    ("pigz", "pigz", None),
    ("zstd", "zstd", None),
)
OVERLAY_IN_USERNS = (5, 11)
OVERLAY_OVER_IDMAPPED = (5, 19)  # an overlay stacks an idmapped mount (the plugin's store_trees)


class Check(Record):
    name: str
    status: str  # ok, warn, fail, skip
    detail: str
    fix: str = ""


class NodeReport(Record):
    node: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "ok": self.ok, "checks": [c._asdict() for c in self.checks]}

    def dumps(self) -> str:
        """Indented: ``--cluster`` reads it through srun, which splits long lines."""
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeReport:
        return cls(str(data["node"]), [Check(**c) for c in data["checks"]])


class ClusterReport(Record):
    nodes: list[NodeReport]
    step_ok: bool = True
    step_error: str = ""
    step_nodes: tuple[str, ...] = ()
    image: str | None = None

    @property
    def ok(self) -> bool:
        return self.step_ok and all(n.ok for n in self.nodes)

    def to_json(self) -> dict[str, object]:
        report: dict[str, object] = {"ok": self.ok, "nodes": [n.to_json() for n in self.nodes]}
        if self.image:
            report["container_step"] = {"image": self.image, "ok": self.step_ok, "nodes": list(self.step_nodes),
                                        "error": self.step_error}
        return report


def node_report(settings: Settings, image: str | None = None) -> NodeReport:
    """Every node check, in order; a check that crashes is reported as failed, not raised."""
    checks: list[Callable[[], Check]] = [
        _user_namespaces, _kernel, _fuse_device, *(partial(_tool, *tool) for tool in TOOLS),
        partial(_image_reader, settings),
        partial(_read_cache, settings),
        *(partial(_path, settings, setting) for setting in ("data_path", "runtime_path", "temp_path")),
        partial(_cache, settings), partial(_store, settings), partial(_configuration, settings),
        partial(_mounts, settings), partial(_named_containers, settings), partial(_start, settings, image),
        _slurm_plugin, _gpus, partial(_cdi, settings), _infiniband,
    ]
    results = []
    for check in checks:
        try:
            results.append(check())
        except Exception as e:  # noqa: BLE001 a check must not hide the others
            function = check.func if isinstance(check, partial) else check
            results.append(Check(function.__name__.strip("_"), "fail", f"the check itself failed: {e}"))
    return NodeReport(platform.node(), results)


def cluster_report(srun_arguments: Sequence[str], image: str | None = None) -> ClusterReport:
    """The node checks on one task per node of a Slurm step (``srun --ntasks-per-node=1 ARGS``),
    and with an image, a step in that image through the plugin on the same nodes."""
    if shutil.which("srun") is None:
        raise MissingTool("srun",
                          hint="--cluster runs a Slurm step; run it where Slurm's clients are")
    # --label: each line says which task wrote it (srun interleaves tasks' output by lines, and
    # splits lines longer than its buffer: the JSON comes indented, in short lines)
    command = ["srun", "--label", "--ntasks-per-node=1", *srun_arguments, *hydria_command(), "doctor", "--json",
               *(("--image", image) if image else ())]
    result = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    outputs: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        task, _, text = line.partition(": ")
        outputs.setdefault(task.strip(), []).append(text)
    nodes = [NodeReport.from_json(json.loads("\n".join(text))) for text in outputs.values() if text[:1] == ["{"]]
    if not nodes:
        raise HydriaError(f"the doctor step failed: {result.stderr.strip() or 'no output'}",
                          hint=f"run it by hand to see why: {' '.join(command)}")
    nodes.sort(key=lambda n: n.node)
    if not image:
        return ClusterReport(nodes)
    step = subprocess.run(["srun", "--ntasks-per-node=1", *srun_arguments, f"--container-image={image}",
                           "sh", "-c", "hostname"], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    return ClusterReport(nodes, step.returncode == 0, step.stderr.strip()[-2000:],
                         tuple(sorted(step.stdout.split())), image)


def render(report: NodeReport) -> str:
    """The human table of a node report."""
    width = max(len(c.name) for c in report.checks)
    lines = [f"hydria doctor: {report.node}", ""]
    for check in report.checks:
        status = "FAIL" if check.status == "fail" else check.status
        lines.append(f"  {check.name:<{width}}  {status:<4}  {check.detail}")
        if check.fix and check.status in ("fail", "warn"):
            lines.append(f"  {'':<{width}}        fix: {check.fix}")
    lines += ["", summary(report.checks)]
    return "\n".join(lines)


def summary(checks: Sequence[Check]) -> str:
    """The table's last line: failures, else warnings and what they mean, else that all passed."""
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    if failed:
        return f"{failed} check(s) failed: what each names does not work here as things are; its fix line says what to do"
    if warned:
        return (f"all checks passed, with {warned} warning(s): containers start here, but what each warning names "
                "is slower, missing or will fail in the case it says; its fix line says how to mend it")
    return "all checks passed"


def render_cluster(report: ClusterReport) -> str:
    lines = []
    for node in report.nodes:
        failed = [c for c in node.checks if c.status == "fail"]
        lines.append(f"{node.node}: " + ("ok" if not failed else
                                         "FAIL: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)))
    if report.image:
        lines.append(f"a step in {report.image} on every node: " +
                     (f"ok ({', '.join(report.step_nodes)})" if report.step_ok else f"FAIL: {report.step_error}"))
    lines.append("all nodes passed" if report.ok else "some nodes failed")
    return "\n".join(lines)


def _user_namespaces() -> Check:
    name = "user namespaces"
    fix = "as root: sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
    maximum = _read_int("/proc/sys/user/max_user_namespaces")
    if maximum == 0:
        return Check(name, "fail", "user.max_user_namespaces is 0", fix)
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        return Check(name, "fail", "kernel.unprivileged_userns_clone is 0",
                     "as root: sysctl -w kernel.unprivileged_userns_clone=1")
    if apparmor.blocked():
        return Check(name, "fail", apparmor.problem(apparmor.script_path()), apparmor.FIX)
    if apparmor.restricted():
        return Check(name, "ok", f"enabled for hydria by its AppArmor profile ({apparmor.PROFILE}), which the "
                                 "kernel's restriction of unprivileged user namespaces needs")
    return Check(name, "ok", f"enabled (user.max_user_namespaces={maximum})")


def _kernel_version() -> tuple[int, ...]:
    return tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2] if is_number(part))


def _kernel() -> Check:
    release = platform.release()
    if _kernel_version() >= OVERLAY_IN_USERNS:
        return Check("kernel", "ok", f"{release}: overlayfs in user namespaces")
    return Check("kernel", "warn", f"{release}: older than 5.11, no overlayfs in user namespaces",
                 "containers use fuse-overlayfs instead (install it); Linux 5.11 or newer is faster")


def _fuse_device() -> Check:
    if not os.path.exists("/dev/fuse"):
        return Check("/dev/fuse", "fail", "missing", f"as root: modprobe fuse; {WITHOUT_FUSE}")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return Check("/dev/fuse", "fail", f"not usable by this user (mode {os.stat('/dev/fuse').st_mode & 0o777:04o})",
                     f"as root: chmod 0666 /dev/fuse (Debian's default; a udev rule keeps it); {WITHOUT_FUSE}")
    return Check("/dev/fuse", "ok", "usable")


def _tool(program: str, package: str, needed_for: str | None) -> Check:
    path = shutil.which(program)
    if path:
        return Check(program, "ok", path)
    if needed_for is None:
        return Check(program, "skip", "not installed (optional)", f"install the Debian package {package}")
    return Check(program, "fail", f"not installed: needed for {needed_for}", f"install the Debian package {package}")


def _image_reader(settings: Settings) -> Check:
    """Which program serves image files on this node, and how to get the fast one."""
    name = "image reader"
    reader, fallback = installed_reader(), shutil.which(FALLBACK)
    install = (f"as the owner of hydria's installation: hydria install-reader (it puts {reader_path()}; "
               "needs gcc, pkg-config, libsquashfuse-dev and libfuse3-dev, or EPEL's squashfuse-devel and fuse3-devel)")
    if reader is not None and settings.fast_reader:
        return Check(name, "ok", f"hydria's reader ({reader}), the fast one (docs/performance.md)")
    if fallback is None and reader is not None:
        return Check(name, "fail", "HYDRIA_FAST_READER is off and squashfuse is not installed: no container can "
                                   "start from an image", "unset HYDRIA_FAST_READER, or install the package squashfuse")
    if fallback is None:
        return Check(name, "fail", "neither hydria's reader nor squashfuse is installed: no container can start "
                                   "from an image", f"{install}; or install the package squashfuse")
    if not settings.fast_reader:
        return Check(name, "warn", f"squashfuse ({fallback}): HYDRIA_FAST_READER is off; programs read images "
                                   "several times slower", "unset HYDRIA_FAST_READER" if reader else install)
    return Check(name, "warn", f"squashfuse ({fallback}): hydria's reader is not installed; programs read "
                               "images several times slower (small files ~6x)", install)


def _read_cache(settings: Settings) -> Check:
    """Where later starts of an image read it from (container/read_cache.py), and what it holds."""
    name, setting = "read cache", "HYDRIA_READ_CACHE_PATH"
    cache = read_cache.configured(settings)
    local = "set HYDRIA_READ_CACHE_PATH to a folder on a node-local disk"
    if cache is None:
        if not settings.read_cache_size:
            return Check(name, "skip", "off (HYDRIA_READ_CACHE_SIZE is 0): every start reads through the image reader",
                         "set HYDRIA_READ_CACHE_SIZE, e.g. 40G")
        return Check(name, "fail", f"{setting} {settings.read_cache_path!r} "
                                   f"{read_cache.path_problem(settings.read_cache_path)}: every start reads through "
                                   "the image reader", "set HYDRIA_READ_CACHE_PATH to a path without them")
    problem = read_cache.placement_problem(cache.folder)
    if problem and settings.origins.get(setting) == "default":
        return Check(name, "skip", f"off: the default {cache.folder} {problem}", local)
    if not settings.fast_reader or installed_reader() is None:
        why = "HYDRIA_FAST_READER is off" if not settings.fast_reader else "hydria's image reader is not installed"
        return Check(name, "warn", f"off: {why}, and only it says which files a container reads: every start reads "
                                   "through squashfuse", "an administrator runs hydria install-reader (docs/install.md)"
                     if settings.fast_reader else "set HYDRIA_FAST_READER=y")
    not_private = private_dir_problem(os.lstat(cache.folder)) if os.path.lexists(cache.folder) else None
    if not_private is not None:
        return Check(name, "fail", f"{cache.folder} {not_private}: images are not unpacked there",
                     f"remove it, or {local}")
    parent = os.path.dirname(cache.folder)
    if not os.path.lexists(cache.folder) and not os.access(parent, os.W_OK | os.X_OK):
        return Check(name, "fail", f"{cache.folder} cannot be made ({parent} is not writable or not there): "
                                   "images are not unpacked", local)
    present = read_cache.entries(cache)
    limit = f"at most {format_size(cache.limit)}"
    detail = (f"{cache.folder}: what containers read of {len(present)} image(s) and layer image(s), "
              f"{format_size(sum(i.size for i in present))} "
              f"({limit}); the files that a container running {read_cache.UNPACK_AFTER:.0f} s reads are kept there, "
              "and later starts read them at the disk's speed")
    concerns, fix = [f"it {problem}"] if problem else [], local
    free, reserve = read_cache.free_and_reserve(cache.folder)
    if free < reserve:
        concerns.append(f"its file system has {format_size(free)} free, less than the tenth "
                        f"({format_size(reserve)}) that an unpack leaves free: no image is unpacked")
        fix = f"make room on that disk, or {local} with room"
    if concerns:
        return Check(name, "warn", f"{detail}; but " + "; and ".join(concerns), fix)
    return Check(name, "ok", detail)


def _can_serve_images(settings: Settings) -> bool:
    try:
        squashfs_server(settings.fast_reader)
    except MissingTool:
        return False
    return True


def _path(settings: Settings, setting: str) -> Check:
    path = Path(getattr(settings, setting))
    name = f"HYDRIA_{setting.upper()}"
    existing = next(p for p in (path, *path.parents) if os.path.exists(p))  # False where it cannot look
    if existing == path and not path.is_dir():
        return Check(name, "fail", f"{path} is not a directory", f"remove it or set {name} elsewhere")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" (it does not exist and {existing} is not writable)"
        return Check(name, "fail", f"{path} is not writable{where}",
                     f"set {name} to a directory this user can write, "
                     f"e.g. /tmp/hydria-$UID/{setting.removesuffix('_path')}")
    if existing == path and path.stat().st_uid != os.geteuid() and setting != "temp_path":
        return Check(name, "fail", f"{path} belongs to another user", f"remove it or set {name} elsewhere")
    return Check(name, "ok", str(path) if existing == path else f"{path} (will be created)")


def _cache(settings: Settings) -> Check:
    """The blob cache: the user's own, or shared as docs/import.md shows; any other layout would
    fail some user's import (the importer refuses it with the same words)."""
    name = "HYDRIA_CACHE_PATH"
    layout = cachelayout.inspect(settings.cache_path)
    if layout.problem:
        return Check(name, "fail", layout.problem, layout.hint)
    if not layout.shared:  # the user's own, or to be made
        return _path(settings, "cache_path")
    if layout.unusable:
        return Check(name, "warn", f"{layout.describe()}: you cannot add to {', '.join(layout.unusable)}; "
                                   "imports use your private cache instead",
                     f"the administrator makes them like the cache: chmod {layout.folder_mode:04o} "
                     f"({cachelayout.GUIDE})")
    return Check(name, "ok", layout.describe())


def _store(settings: Settings) -> Check:
    """The image store (docs/store.md): one that others could change is not used."""
    from hydria.image.kept.store import ImageStore

    name = "image store"
    if not settings.store_path:
        return Check(name, "skip", "none (HYDRIA_STORE_PATH)")
    try:
        store = ImageStore(settings.store_path, settings.store_owner)
        store.check()
    except HydriaError as e:
        return Check(name, "fail", f"not used: {e.message}", e.hint or "")
    owner = user_name(store.owner_uid)
    problem = _store_import_problem(store.owner_uid)
    if problem is not None:
        return Check(name, "fail", f"{store.root}: {owner} cannot import into it: {problem[0]}", problem[1])
    if not os.access(store.images, os.R_OK):
        return Check(name, "ok", f"{store.root}, written by {owner} only")
    images = store.kept_images()
    size = store.size_on_disk()
    detail = f"{store.root}, written by {owner} only: {len(images)} image(s), {format_size(size)}"
    if settings.store_prune_above and size > settings.store_prune_above:
        return Check(name, "warn", f"{detail}, more than HYDRIA_STORE_PRUNE_ABOVE",
                     f"as {owner}: hydria store prune (images used within a day stay)")
    return Check(name, "ok", detail)


def _store_import_problem(owner_uid: int) -> tuple[str, str] | None:
    """Why the store's owner could not import (the Slurm plugin has it import a step's image):
    ``hydria store check`` as the owner, from root as the plugin runs it; None when it could, or
    when this user can not tell (neither root nor the owner)."""
    if os.geteuid() not in (0, owner_uid) or (os.geteuid() != owner_uid and shutil.which("runuser") is None):
        return None
    command = [*hydria_command(), "store", "check"]
    if os.geteuid() != owner_uid:
        command = ["runuser", "-u", user_name(owner_uid), "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    message = next((line[len("[ERROR] "):] for line in lines if line.startswith("[ERROR] ")),
                   lines[0] if lines else f"exit status {result.returncode}")
    hint = next((line[len("[INFO] hint: "):] for line in lines if line.startswith("[INFO] hint: ")), "")
    return message, hint or f"run it to see why: sudo -u {user_name(owner_uid)} hydria store check"


def _configuration(settings: Settings) -> Check:
    """The configuration folders: enroot's own hooks and mount files, kept from enroot, are left
    out at every start (hooks/scripts.py), which says so each time."""
    from hydria.hooks.scripts import enroot_own_files

    name = "configuration"
    left_out = enroot_own_files(settings)
    folders = f"{settings.sysconf_path}, {settings.config_path}"
    if left_out:
        return Check(name, "warn", f"{folders}: enroot's own files, left out at every start with a warning: "
                     f"{', '.join(left_out)}", "remove them: hydria does their work itself (docs/migration.md)")
    return Check(name, "ok", folders)


def _mounts(settings: Settings) -> Check:
    """A squashfs mounted with the image reader and an overlay on it, in a user namespace, as a start of
    an image file does (its writes on the runtime tmpfs; here in the temporary path)."""
    name = "namespaces and mounts"
    if shutil.which("mksquashfs") is None or not _can_serve_images(settings):
        return Check(name, "skip", "needs mksquashfs and an image reader (see above)")
    work = Path(tempfile.mkdtemp(prefix="hydria-doctor.", dir=temp_folder(settings.temp_path)))
    try:
        started = time.monotonic()
        kind = _probe_overlay(settings, work, work)
        elapsed = 1000 * (time.monotonic() - started)
        server = os.path.basename(squashfs_server(settings.fast_reader))
        return Check(name, "ok", f"user + mount namespace, {server}, {kind}: {elapsed:.0f} ms")
    except HydriaError as e:
        return Check(name, "fail", e.message, e.hint or "")
    finally:
        delete_tree(work)


def _named_containers(settings: Settings) -> Check:
    """The overlay of a named container, whose writes live in the data path: the kernel refuses an
    upper directory on NFS and most network file systems (and FUSE), where fuse-overlayfs serves."""
    name = "named containers"
    data = Path(settings.data_path)
    existing = next(p for p in (data, *data.parents) if os.path.exists(p))
    if shutil.which("mksquashfs") is None or not _can_serve_images(settings):
        return Check(name, "skip", "needs mksquashfs and an image reader (see above)")
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check(name, "skip", "the data path is not writable (see HYDRIA_DATA_PATH above)")
    work = Path(tempfile.mkdtemp(prefix="hydria-doctor.", dir=temp_folder(settings.temp_path)))
    writes = Path(tempfile.mkdtemp(prefix=".hydria-doctor.", dir=existing))
    where = f"{existing} ({file_system_type(str(existing))})"
    try:
        kind = _probe_overlay(settings, work, writes)
    except HydriaError as e:
        return Check(name, "fail", f"data path {where}: {e.message}", e.hint or "")
    finally:
        delete_tree(work)
        delete_tree(writes)
    if kind == "overlay":
        return Check(name, "ok", f"the kernel's overlay on the data path {where}")
    if not settings.native_overlayfs:
        return Check(name, "ok", f"fuse-overlayfs on the data path {where} (HYDRIA_NATIVE_OVERLAYFS is off)")
    return Check(name, "warn", f"the kernel refuses an overlay on the data path {where}: named containers "
                               "use fuse-overlayfs (slower on metadata-heavy work)",
                 "for the kernel's overlay, set HYDRIA_DATA_PATH on a local file system, "
                 "e.g. /tmp/hydria-$UID/data or node-local scratch")


def _probe_overlay(settings: Settings, work: Path, writes: Path) -> str:
    """Mount a small squashfs from ``work`` with an overlay whose upper and work directories are
    in ``writes``, in a user namespace of a child, read and write through it; returns the kind of
    overlay a start would use. Raises HydriaError."""
    from hydria.runtime import namespaces, rootfs

    (work / "tree").mkdir()
    (work / "tree" / "probe").write_text("hydria\n")
    run_tool(["mksquashfs", str(work / "tree"), str(work / "probe.sqsh"), "-quiet", "-noappend", "-no-progress"],
             "cannot make the probe image")
    uid, gid = os.getuid(), os.getgid()

    def inside() -> None:
        plain = settings._replace(remap_root=False, unshare_net=False, unshare_ipc=False, unshare_uts=False)
        namespaces.enter(plain, uid, gid)
        for folder in (work / "lower", writes / "upper", writes / "work", work / "root"):
            folder.mkdir()
        rootfs.mount_squashfs(str(work / "probe.sqsh"), str(work / "lower"), uid, gid, settings.fast_reader)
        kind = rootfs.mount_overlay([str(work / "lower")], str(writes / "upper"), str(writes / "work"),
                                    str(work / "root"), uid, gid, settings.native_overlayfs)
        if (work / "root" / "probe").read_text() != "hydria\n":
            raise HydriaError("the image's file reads back wrong through the image reader and the overlay")
        (work / "root" / "written").write_text("ok\n")
        (work / "kind").write_text(kind)

    namespaces.in_child(inside)
    return (work / "kind").read_text()


def _start(settings: Settings, image: str | None) -> Check:
    """``hydria start IMAGE true``, timed; a registry image (``docker://...``, as ``--cluster``'s
    step takes) is imported into a temporary file first, the import timed too."""
    name = "container start"
    if image is None:
        return Check(name, "skip", "no --image given")
    if os.path.exists(image) or ("://" not in image and "#" not in image):  # a file or a container's name
        return _started(name, image, image, "")
    uri = image if "://" in image else f"docker://{image}"  # as --container-image takes it
    with tempfile.TemporaryDirectory(prefix="hydria-doctor-", dir=temp_folder(settings.temp_path)) as folder:
        started = time.monotonic()
        result = subprocess.run([*hydria_command(), "import", "-o", f"{folder}/image.sqsh", uri],
                                capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            return Check(name, "fail", f"hydria import {uri}: {_first_line(result)}",
                         f"run it to see the whole error: hydria import -o /tmp/x.sqsh {uri}")
        imported = f"import {1000 * (time.monotonic() - started):.0f} ms, "
        return _started(name, image, f"{folder}/image.sqsh", imported, uri)


def _started(name: str, image: str, path: str, imported: str, uri: str = "") -> Check:
    started = time.monotonic()
    result = subprocess.run([*hydria_command(), "start", path, "true"], capture_output=True, text=True, check=False,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        return Check(name, "fail", f"hydria start {image} true: {_first_line(result)}",
                     "run that command to see the whole error" if path == image else
                     f"import it (hydria import {uri}) and start the file to see the whole error")
    return Check(name, "ok", f"hydria start {image} true: {imported}{1000 * (time.monotonic() - started):.0f} ms")


def _first_line(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[0]


def _slurm_plugin() -> Check:
    name = "slurm plugin"
    if shutil.which("scontrol") is None:
        return Check(name, "skip", "Slurm is not installed here")
    result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=False, timeout=30)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(name, "warn", f"cannot read Slurm's configuration: {last}",
                     "check SLURM_CONF and that slurmctld runs")
    config = dict(line.split("=", 1) for line in result.stdout.splitlines() if " = " in line)
    plugstack = next((v.strip() for k, v in config.items() if k.strip() == "PlugStackConfig"),
                     "/etc/slurm/plugstack.conf")
    for line in _plugstack_lines(Path(plugstack)):
        fields = line.split()
        if len(fields) >= 2 and fields[1].endswith("spank_hydria.so"):
            plugin = Path(fields[1])
            program = next((f.split("=", 1)[1] for f in fields[2:] if f.startswith("hydria=")), None)
            if not plugin.is_file():
                return Check(name, "fail", f"{plugin} is listed in the plugstack but missing",
                             "as root: hydria slurm install-plugin")
            if program and not os.access(program, os.X_OK):
                return Check(name, "fail", f"the plugin runs {program}, which is missing",
                             "as root: hydria slurm install-plugin (it records this hydria's path)")
            return _store_trees(fields, Check(name, "ok", f"{plugin} ({fields[0]}) in {plugstack}"))
    return Check(name, "warn", f"hydria's plugin is not in {plugstack}",
                 "as root: hydria slurm install-plugin, and include its snippet in plugstack.conf")


def _store_trees(fields: Sequence[str], found: Check) -> Check:
    """The plugin's check, with what its ``store_trees`` argument gives on this node's kernel
    (docs/slurm.md, "Kept once per node: the store's images")."""
    trees = next((field.split("=", 1)[1] for field in fields[2:] if field.startswith("store_trees=")), None)
    if not trees:
        return found
    if _kernel_version() < OVERLAY_OVER_IDMAPPED:
        return found._replace(status="warn", detail=f"{found.detail}; store_trees={trees} needs Linux 5.19 or newer "
                              f"(this is {platform.release()}): each user keeps their own trees of the store's images",
                              fix="a newer kernel, or remove store_trees from the plugstack line")
    return found._replace(detail=f"{found.detail}; the store's images are kept once per node in {trees}")


def _plugstack_lines(path: Path, depth: int = 0) -> list[str]:
    try:
        text = path.read_text()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include ") and depth < 4:
            for included in sorted(glob.glob(line.split(None, 1)[1].strip())):
                lines += _plugstack_lines(Path(included), depth + 1)
        elif line:
            lines.append(line)
    return lines


def _gpus() -> Check:
    from hydria.hooks import ldcache
    from hydria.hooks.nvidia import discover_gpus

    gpus = discover_gpus("/")
    if not gpus:
        return Check("gpus", "skip", "no NVIDIA GPU on this node")
    try:  # where the NVIDIA hook finds the driver's libraries
        cache = Path("/etc/ld.so.cache").read_bytes()
    except OSError:
        cache = b""
    if not any(soname == "libnvidia-ml.so.1" for soname, _ in ldcache.entries(cache)):
        return Check("gpus", "fail", f"{len(gpus)} GPU(s) but no libnvidia-ml.so.1 in the loader cache",
                     "install the NVIDIA driver's user-space libraries, then run ldconfig")
    return Check("gpus", "ok", ", ".join(f"{g.number}: {g.model}" for g in gpus))


def _cdi(settings: Settings) -> Check:
    """The CDI devices that ``start --device`` can give (docs/devices.md), and specs left out."""
    from hydria.hooks import cdi

    dirs = cdi.spec_dirs(settings.cdi_spec_dirs)
    registry = cdi.load(dirs)
    problems = [*registry.invalid.values(),
                *(f"{name} is defined by {' and '.join(paths)}" for name, paths in registry.conflicts.items())]
    if problems:
        return Check("cdi devices", "fail", f"{len(registry.devices)} device(s); left out: {'; '.join(problems)}",
                     "the device vendor's tool writes the spec anew (e.g. nvidia-ctk cdi generate); "
                     "hydria cdi list shows each problem")
    if not registry.devices:
        return Check("cdi devices", "skip", f"no CDI spec in {', '.join(dirs) or 'HYDRIA_CDI_SPEC_DIRS (empty)'}")
    kinds = sorted(registry.kinds())
    return Check("cdi devices", "ok", f"{len(registry.devices)} device(s) of {', '.join(kinds)}: --device "
                 f"{min(registry.devices)}")


def _infiniband() -> Check:
    devices = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
    if not devices:
        return Check("infiniband", "skip", "no RDMA device on this node")
    verbs = sorted(glob.glob("/dev/infiniband/uverbs*"))
    if not verbs or not all(os.access(v, os.R_OK | os.W_OK) for v in verbs):
        return Check("infiniband", "fail", f"{', '.join(devices)}: /dev/infiniband/uverbs* missing or not usable",
                     "load ib_uverbs and make the devices readable and writable by users")
    return Check("infiniband", "ok", ", ".join(devices))


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
