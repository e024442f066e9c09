"""A real start, piece by piece: namespaces and mounts, named containers' overlay, and with --image a whole start."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from hydria.config import Settings
from hydria.doctor.images import can_serve_images
from hydria.doctor.report import Check
from hydria.errors import HydriaError
from hydria.paths import hydria_command, temp_folder
from hydria.runtime.filesystems import file_system_type
from hydria.runtime.reader import (
    squashfs_server,
)
from hydria.tools import run_tool
from hydria.trees import delete_tree


def check_mounts(settings: Settings) -> Check:
    """A squashfs mounted with the image reader and an overlay on it, in a user namespace, as a start of
    an image file does (its writes on the runtime tmpfs; here in the temporary path)."""
    name = "namespaces and mounts"
    if shutil.which("mksquashfs") is None or not can_serve_images(settings):
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


def check_named_containers(settings: Settings) -> Check:
    """The overlay of a named container, whose writes live in the data path: the kernel refuses an
    upper directory on NFS and most network file systems (and FUSE), where fuse-overlayfs serves."""
    name = "named containers"
    data = Path(settings.data_path)
    existing = next(p for p in (data, *data.parents) if os.path.exists(p))
    if shutil.which("mksquashfs") is None or not can_serve_images(settings):
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


def check_container_start(settings: Settings, image: str | None) -> Check:
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
