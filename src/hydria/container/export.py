"""``export``: write a container (its image plus the writes it kept, or its unpacked tree) back to
a squashfs image file.

A child process enters a user namespace mapped to root (so that it can read every file the user
owns, whatever its mode) and a mount namespace, mounts the container's root filesystem as a start
would, and runs mksquashfs on it with the image options of the settings. What is left out, as
enroot does: the contents of /dev, and the empty mode-0000 files and directories that mounts left
behind as mount points. The file appears under its name only when complete (atomic rename).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from hydria.config import Settings
from hydria.container.named import check_unchanged
from hydria.errors import HydriaError
from hydria.paths import NAME_MAX, ensure_dir, output_file, process_tag, staging_file, umask
from hydria.runtime import namespaces, rootfs
from hydria.runtime import syscalls as sc
from hydria.tools import run_tool
from hydria.trees import walk


def export(name: str, output: str | None, force: bool, settings: Settings) -> Path:
    """Raises HydriaError for a missing container, an existing output without force, or a failed
    mksquashfs; nothing is left at the output path then."""
    from hydria.container.named_containers import NamedContainers

    container = NamedContainers(settings).container(name)
    check_unchanged(container)
    default = f"{name}.sqsh"
    if output is None and len(default.encode(errors="surrogateescape")) > NAME_MAX:
        raise HydriaError(f"the container's name is too long for the default output {ascii(default)[:40]}...: "
                          f"a file name holds at most {NAME_MAX} bytes", hint="name the file: hydria export -o FILE NAME")
    target = output_file(output, default, force=force or settings.force_override)
    staging = staging_file(target, "exporting")
    try:
        namespaces.in_child(lambda: _squash(container, staging, target.name, settings))
        os.chmod(staging, 0o666 & ~umask())
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def _squash(container: rootfs.Container, output: Path, label: str, settings: Settings) -> None:
    uid, gid = os.getuid(), os.getgid()
    runtime = ensure_dir(settings.runtime_path, setting="HYDRIA_RUNTIME_PATH")
    namespaces.enter(settings._replace(remap_root=True, unshare_net=False, unshare_ipc=False, unshare_uts=False),
                     uid, gid)
    sc.mount("tmpfs", str(runtime), "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=700")
    area = f"{runtime}/{process_tag()}"
    root = rootfs.mount_container(container, area, 0, 0, settings.native_overlayfs, settings.fast_reader)
    excludes = Path(area, "excludes")
    written = container.directory or (f"{container.home}/upper" if container.home else None)
    excludes.write_text("".join(f"{p}\n" for p in ["dev/*", *_placeholders(Path(written or root))]))
    command = ["mksquashfs", root, str(output), "-all-root", "-noappend", "-no-progress", "-quiet",
               *(("-processors", str(settings.max_processors)) if settings.max_processors > 0 else ()),
               *shlex.split(settings.squash_options), "-wildcards", "-ef", str(excludes)]
    run_tool(command, f"cannot write {label}")


def _placeholders(tree: Path) -> list[str]:
    """Empty mode-0000 files and directories under ``tree`` (mount points that mounts created),
    relative to it, with mksquashfs's wildcard characters escaped."""
    found = []
    for directory, names, files in walk(tree):
        for entry in (*names, *files):
            path = os.path.join(directory, entry)
            info = os.lstat(path)
            if stat.S_IMODE(info.st_mode) == 0 and (
                    (stat.S_ISDIR(info.st_mode) and not os.listdir(path)) or
                    (stat.S_ISREG(info.st_mode) and info.st_size == 0)):
                relative = os.path.relpath(path, tree)
                found.append("".join(f"\\{c}" if c in "*?[]\\" else c for c in relative))
    return found
