"""Named containers in ``$HYDRIA_DATA_PATH``: create, look up, list, remove.

A container is a directory ``DATA/NAME`` holding, by default, ``image.sqsh`` (a hardlink to the
image file; for a layered image, its layer images beside it too), ``image.id``, the image's identity
at create (a start refuses the container when a rewrite of the shared file changed it), ``upper/``,
the overlay directory where its writes persist, and ``work/``, which holds one overlay work directory per running start
(runtime/rootfs.py): ``create`` takes a fraction of a second and many
containers share one image's blocks. ``--unpack`` (or ``HYDRIA_UNPACK``) makes enroot's plain
directory tree instead, in ``rootfs/``.

Where an image file cannot be linked (another file system, another user's file under
protected_hardlinks), it is copied once into ``DATA/.images/KEY.sqsh`` (KEY: the file's identity,
as the read cache names it) and every container made of it links that copy, so seven creates of
one image keep one copy on disk and one tree in the read cache; a copy that no container links
any more goes when a container is removed.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from hydria.anonfile import hardlinked, link_or_copy
from hydria.config import Settings
from hydria.container.named import (
    IDENTITY,
    IMAGE,
    ROOTFS,
    container_names,
    container_path,
    find,
    missing,
)
from hydria.container.running import RunningProcess, running
from hydria.digits import is_number
from hydria.errors import AlreadyExists, HydriaError, InvalidArgument, InvalidImage
from hydria.partial import remove_dead_leftovers
from hydria.paths import ensure_dir, hidden_sibling, is_own_private_dir, process_tag
from hydria.runtime import syscalls as sc
from hydria.runtime.layered import layered_text
from hydria.runtime.rootfs import Container, check_image, image_layers, overlay_folder_problem
from hydria.trees import delete_tree

SHARED_COPIES = ".images"
RENAME_ATTEMPTS = 50  # forced creates racing for one name where the file system cannot exchange two


class NamedContainers:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = Path(settings.data_path)

    def path(self, name: str) -> Path:
        return Path(container_path(self.settings.data_path, name))

    def container(self, name: str) -> Container:
        """Raises ContainerNotFound when there is no such container."""
        return find(self.settings.data_path, name)

    def create(self, image: Path, name: str | None, *, force: bool, unpack: bool) -> Path:
        """Raises HydriaError for a bad image or name, or an existing container without force."""
        if not str(image):
            raise InvalidArgument()
        check_image(image)
        layers = image_layers(str(image))
        layered = layers != [str(image)]
        taken = {IMAGE, IDENTITY, ROOTFS, "upper", "work"} & {os.path.basename(layer) for layer in layers if layered}
        if taken:
            raise InvalidImage(f"{image} names a layer image {min(taken)!r}, a name a container keeps for "
                               "itself", hint="import the image again")
        name = name if name is not None else image.name.removesuffix(".sqsh")
        target = self.path(name)
        problem = None if unpack else overlay_folder_problem(str(target), lower=False)
        if problem:
            raise HydriaError(f"cannot create {target}: it {problem}, which a container's overlay cannot be mounted "
                              "from", hint="choose a name without ',' or '\\' (--name) and a HYDRIA_DATA_PATH "
                                           "without them, or create it with --unpack")
        replace = force or self.settings.force_override
        ensure_dir(self.settings.data_path, setting="HYDRIA_DATA_PATH")
        self._sweep_leftovers()
        if not replace and (target.exists() or target.is_symlink()):
            raise AlreadyExists(target, hint="use --force to replace it")
        staging = self.root / hidden_sibling(name, "creating", process_tag())
        try:
            staging.mkdir(mode=0o700)
            if unpack:
                _unpack(image, staging / ROOTFS, self.settings)
            else:
                if layered:  # its layer images beside it, as in the cache
                    for layer in dict.fromkeys(layers):  # an image may have one layer twice
                        self._link(Path(layer).resolve(), staging / os.path.basename(layer))
                    (staging / IMAGE).write_bytes(layered_text([os.path.basename(layer) for layer in layers]))
                else:
                    self._link(image.resolve(), staging / IMAGE)
                (staging / IDENTITY).write_text(check_image(staging / IMAGE) + "\n")
                (staging / "upper").mkdir()
                (staging / "work").mkdir()
            self._put(staging, target, replace)
        finally:
            if staging.exists():  # a failed create, or the container this one replaced
                delete_tree(staging)
                self._collect_copies()
        return target

    def _link(self, source: Path, target: Path) -> None:
        """Make ``target`` the image file ``source``: a hardlink, else a link to the one copy of
        it in ``SHARED_COPIES`` (made now where there is none). Raises OSError."""
        if hardlinked(source, target):
            return
        from hydria.container.read_cache import image_key

        folder = self.root / SHARED_COPIES
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            pass
        if not is_own_private_dir(folder):
            link_or_copy(source, target)  # no folder of this user's own to share copies in
            return
        kept = folder / f"{image_key(str(source))}.sqsh"
        for _ in range(RENAME_ATTEMPTS):
            try:
                link_or_copy(source, kept)
            except FileExistsError:
                pass  # an earlier or a concurrent create copied it
            try:
                os.link(kept, target)
                return
            except FileNotFoundError:
                continue  # a removal collected it meanwhile: copy it again
        link_or_copy(source, target)

    def _collect_copies(self) -> None:
        """Remove the shared copies that no container links any more."""
        folder = self.root / SHARED_COPIES
        if not is_own_private_dir(folder):
            return
        for entry in os.scandir(folder):
            try:
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink == 1:
                    os.unlink(entry.path)
            except FileNotFoundError:
                continue

    def _put(self, staging: Path, target: Path, replace: bool) -> None:
        """Rename ``staging`` to ``target``. A container there stays unless ``replace``: then the
        two are exchanged in one step, so the name always holds a whole container and, of
        concurrent forced creates, the last one stays; the container it replaced is left at
        ``staging`` for the caller to delete. Where the file system cannot exchange (NFS), the
        one there is removed first and the name is empty for that moment."""
        for _ in range(RENAME_ATTEMPTS):
            try:
                _rename_new(staging, target)
                return
            except FileExistsError:
                if not replace:
                    raise AlreadyExists(target, hint="use --force to replace it") from None
            try:
                sc.renameat2(str(staging), str(target), sc.RENAME_EXCHANGE)
                return
            except FileNotFoundError:
                continue  # removed meanwhile: the name is free again
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOSYS):
                    raise HydriaError(f"cannot replace {target}: {e.strerror}") from None
                self._discard(target)
        raise HydriaError(f"cannot replace {target}: other creates of {target.name} replaced it "
                          f"{RENAME_ATTEMPTS} times while this one tried", hint="create it again")

    def _sweep_leftovers(self) -> None:
        """Remove what creates and removals of this node left when they were killed (SIGKILL, a
        second signal during their cleanup): their staging and trash folders, named after the
        node and a process that is gone."""
        node = os.uname().nodename
        remove_dead_leftovers(self.root, lambda name: _pid_of_leftover(name, node) if name.startswith(".") else None)

    def names(self) -> list[str]:
        """Raises HydriaError when the data path cannot be read."""
        try:
            return container_names(str(self.root))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise HydriaError(f"{self.root} (HYDRIA_DATA_PATH): {e.strerror}") from None

    def running(self) -> dict[str, list[RunningProcess]]:
        """The running processes of each container that has any (see container/running.py)."""
        return running({name: self.path(name) for name in self.names()}, self.settings.runtime_path)

    def _refuse_running(self, names: Sequence[str]) -> None:
        """Raise HydriaError (busy) when any of ``names`` runs: removing it would leave the running
        instance without its files (enroot deletes them from under it)."""
        running = self.running()
        for name in names:
            if name in running:
                pids = ", ".join(str(process.pid) for process in running[name])
                raise HydriaError(f"Device or resource busy: container {name} is running (PID {pids})",
                                  hint="removing it would leave the running instance without its files: end it "
                                       f"first (kill {pids}) and remove it then; hydria list --fancy shows it")

    def remove(self, names: Sequence[str], confirm: Callable[[Path], bool] | None = None) -> list[str]:
        """Delete the containers ``names``, each that ``confirm`` (given its path) accepts; every
        door (command line, API, Slurm) comes here. All are checked before any is deleted: none
        when one is running. Returns the names deleted. Raises NotFound, HydriaError (busy)."""
        paths = [self.path(name) for name in names]
        for path in paths:
            if not path.is_dir():
                raise missing(self.settings.data_path, path.name)
        self._refuse_running(names)
        removed = []
        for path in paths:
            if confirm is None or confirm(path):
                self._discard(path)
                removed.append(path.name)
        return removed

    def _discard(self, path: Path) -> None:
        """Take ``path`` out of the store at once (a rename: of concurrent removals, one does it),
        then delete it."""
        trash = self.root / hidden_sibling(path.name, "removing", process_tag(), str(time.monotonic_ns()))
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return  # another process removed it meanwhile
        except OSError as e:
            raise HydriaError(f"cannot remove {path}: {e.strerror}") from None
        delete_tree(trash)
        self._collect_copies()


def _rename_new(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, which must not exist. Raises FileExistsError, OSError."""
    try:
        sc.renameat2(str(source), str(target), sc.RENAME_NOREPLACE)
        return
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
    try:  # a file system without the flag: a container's folder is never empty, so rename fails on one
        os.rename(source, target)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
            raise FileExistsError(e.errno, e.strerror, str(target)) from None
        raise


def _pid_of_leftover(name: str, node: str) -> int | None:
    """The process that made a staging (``.NAME.creating.NODE.PID``) or trash folder
    (``.NAME.removing.NODE.PID.NS``) of this node, else None."""
    for marker, tail in ((".creating.", 1), (".removing.", 2)):
        if marker + node + "." in name:
            fields = name.rsplit(".", tail)
            if len(fields) == tail + 1 and is_number(fields[1]):
                return int(fields[1])
    return None


def _unpack(image: Path, target: Path, settings: Settings) -> None:
    """Unpack ``image`` into the new folder ``target``; a layered image is merged into one file
    beside ``target`` first (what a start of it shows), which goes when the unpack ends."""
    from hydria.image.squash.one_file import one_file
    from hydria.image.squash.squashfs import squash_plan
    from hydria.tools import ToolFailed, run_tool

    try:
        with ExitStack() as stack:
            squashfs, held = one_file(image, target, squash_plan(settings.squash_options, settings.max_processors),
                                      stack)
            run_tool(["unsquashfs", "-no-progress", "-quiet", "-user-xattrs", "-d", str(target), str(squashfs)],
                     f"unsquashfs {image} failed", hint="install the Debian package squashfs-tools", pass_fds=held)
    except ToolFailed as e:
        if "File name too long" not in e.message:
            raise
        raise HydriaError(f"cannot unpack {image}: it holds paths longer than this system allows "
                          f"({os.pathconf('/', 'PC_PATH_MAX')} bytes)",
                          hint="create it without --unpack: the image is then mounted as it is") from None
