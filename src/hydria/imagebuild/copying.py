"""``COPY`` and ``ADD`` as Docker's builder does them, run in a step's mounted root.

* sources are paths (with ``filepath.Match`` wildcards) under a source root: the build context
  (``.dockerignore`` applied), or another stage's or image's root (``--from``); a source's own
  symlinks are followed inside its root, symlinks within a copied folder stay links;
* a folder's contents are copied, not the folder; several sources, a wildcard or a destination
  ending in ``/`` make the destination a folder; a relative destination is under ``WORKDIR``;
* files keep their permission bits and modification times (``--chmod`` sets the bits of all);
  everything belongs to root unless ``--chown`` (names looked up in the image's own
  ``/etc/passwd`` and ``/etc/group``), folders made on the way too;
* ``ADD`` unpacks a local tar archive (plain, gzip, bzip2, xz) into the destination, keeping its
  owners, as a layer would be: no path outside the destination, no device nodes.

Every path written is resolved inside the root (runtime/mounts.resolve_in_root), so a link in the
image cannot send a copy outside it.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.image.squash.flatten import UnsafeLayer, clean_path
from hydria.imagebuild import ignore
from hydria.paths import open_binary
from hydria.record import Record
from hydria.runtime.mounts import read_in_root, resolve_in_root

WILDCARDS = frozenset("*?[")
FOLDER_MODE = 0o755


class CopyError(HydriaError):
    """A source that is not there, or a destination that cannot take it."""


class SourceRoot(Record):
    """Where sources are read: ``path`` on the host; ``patterns``: .dockerignore's (the context)."""

    path: str
    name: str  # "the build context", "stage build", for messages
    patterns: tuple[ignore.Pattern, ...] = ()


class Owner(Record):
    uid: int
    gid: int


def matches(source_root: SourceRoot, source: str) -> list[str]:
    """The relative paths that ``source`` names in the source root, wildcards expanded and
    excluded paths left out. Raises CopyError when nothing matches."""
    cleaned = os.path.normpath("/" + source).lstrip("/")
    if not cleaned or cleaned == ".":
        return [""]
    parts = cleaned.split("/")
    found = [""]
    for part in parts:
        following = []
        for prefix in found:
            if not (WILDCARDS & set(part)):
                following.append(f"{prefix}/{part}" if prefix else part)
                continue
            folder = resolve_in_root(source_root.path, prefix)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            following += [f"{prefix}/{name}" if prefix else name for name in names if fnmatch.fnmatchcase(name, part)]
        found = following
    present = [path for path in found if os.path.lexists(resolve_in_root(source_root.path, path))]
    kept = [path for path in present if ignore.excluding_rule(path, source_root.patterns) is None]
    if kept:
        return kept
    if present:
        rule = ignore.excluding_rule(present[0], source_root.patterns)
        raise CopyError(f"{source}: not in {source_root.name}: excluded by the .dockerignore rule {rule!r}",
                        hint="change .dockerignore, or copy another path")
    raise CopyError(f"{source}: no such file or directory in {source_root.name}",
                    hint="sources are relative to the build context (the folder given to hydria build)"
                    if not source_root.patterns or source_root.name == "the build context" else None)


class Listed(Record):
    """An entry of a source folder as a copy meets it."""

    entry: os.DirEntry[str]
    path: str  # relative to the source root
    excluded: bool  # by .dockerignore or --exclude
    descend: bool  # a folder the copy looks into (also an excluded one that a "!" pattern may reopen)


def listing(source_root: SourceRoot, folder: str, inner: str) -> list[Listed]:
    """The entries of ``folder`` (``inner`` in the source root) that a copy meets, in name order:
    the copy itself and the digest of what it reads (build/steps.py) both walk with this."""
    with os.scandir(folder) as scanned:
        entries = sorted(scanned, key=lambda e: e.name)
    met = []
    for entry in entries:
        path = f"{inner}/{entry.name}" if inner else entry.name
        excluded = ignore.excluding_rule(path, source_root.patterns) is not None
        descend = entry.is_dir(follow_symlinks=False) and (
            not excluded or ignore.may_hold_included(path, source_root.patterns))
        if not excluded or descend:
            met.append(Listed(entry, path, excluded, descend))
    return met


def copy(source_root: SourceRoot, sources: Sequence[str], destination: str, root: str, *,
         chmod: int | None = None, owner: Owner | None = None, unpack: bool = False) -> dict[str, Owner]:
    """Copy ``sources`` into ``root`` at ``destination`` (absolute, in the container). Returns
    the owner of each path made (relative to the root), for the layer."""
    found = [(source, path) for source in sources for path in matches(source_root, source)]
    into_folder = destination.endswith("/") or len(found) > 1 or any(WILDCARDS & set(s) for s in sources)
    target = destination.rstrip("/") or "/"
    if not into_folder and os.path.isdir(resolve_in_root(root, target)):
        into_folder = True
    writer = _Writer(root, chmod, owner)
    for _, relative in found:
        host = resolve_in_root(source_root.path, relative)
        if os.path.isdir(host):
            writer.folder(target)
            writer.tree(host, target, source_root, relative)
        elif unpack and _is_archive(host):
            writer.folder(target)
            writer.unpack(host, target)
        else:
            name = os.path.basename(relative) if relative else os.path.basename(host)
            writer.entry(host, os.path.join(target, name) if into_folder else target)
    return writer.owners


def owner_of(root: str, text: str, given_as: str = "--chown=") -> Owner:
    """``--chown=USER[:GROUP]`` (or ``USER``'s, ``given_as`` for messages): IDs, or names of the
    image's own ``/etc/passwd`` and ``/etc/group`` (a user's group is its primary one, a numeric
    user's group the same number)."""
    user, _, group = text.partition(":")
    uid, primary = _lookup(root, "/etc/passwd", user, given_as + text)
    gid = _lookup(root, "/etc/group", group, given_as + text)[0] if group else primary
    return Owner(uid, gid)


def home_of(root: str, user: str) -> str | None:
    """The home folder the image's ``/etc/passwd`` gives ``user`` (a name or an ID), if any."""
    for fields in _table(root, "/etc/passwd"):
        if len(fields) >= 6 and user in (fields[0], fields[2]) and fields[5].startswith("/"):
            return fields[5]
    return None


def _lookup(root: str, table: str, name: str, text: str) -> tuple[int, int]:
    """The ID of ``name`` in ``table`` (and, for passwd, its primary group)."""
    if is_number(name):
        return int(name), int(name)
    for fields in _table(root, table):
        if len(fields) >= 3 and fields[0] == name and is_number(fields[2]):
            return int(fields[2]), int(fields[3]) if len(fields) > 3 and is_number(fields[3]) else int(fields[2])
    raise CopyError(f"{text}: the image has no {'user' if table.endswith('passwd') else 'group'} {name!r} "
                    f"in {table}", hint="give numeric IDs (--chown=1000:1000), or create it in an earlier RUN")


def _table(root: str, table: str) -> Iterator[list[str]]:
    """The fields of each line of the image's ``/etc/passwd`` or ``/etc/group`` (none if unreadable
    or no plain file)."""
    return (line.split(":") for line in read_in_root(root, table, errors="replace").split("\n"))


def make_folder(root: str, path: str) -> dict[str, Owner]:
    """``WORKDIR``: the folder and its parents, where missing."""
    writer = _Writer(root, None, None)
    writer.folder(path)
    return writer.owners


def _is_archive(path: str) -> bool:
    try:
        return os.path.isfile(path) and tarfile.is_tarfile(path)
    except OSError:
        return False


class _Writer:
    def __init__(self, root: str, chmod: int | None, owner: Owner | None) -> None:
        self.root = root
        self.chmod = chmod
        self.owner = owner
        self.owners: dict[str, Owner] = {}

    def _made(self, host: str, owner: Owner | None = None) -> None:
        relative = os.path.relpath(host, self.root)
        chosen = owner or self.owner
        if chosen is not None:
            self.owners[relative] = chosen

    def folder(self, path: str) -> str:
        """Make ``path`` and its missing parents; its host path. One step per part of the path
        (links of the image resolved inside the root where met), so any depth costs linear time."""
        host = self.root
        current = "/"
        for part in [p for p in path.split("/") if p not in ("", ".")]:
            current = os.path.join(current, part)
            candidate = os.path.join(host, part)
            if part == ".." or os.path.islink(candidate):
                candidate = resolve_in_root(self.root, current)
            if not os.path.isdir(candidate):
                if os.path.lexists(candidate):
                    raise CopyError(f"cannot make the folder {current}: a file is there")
                os.mkdir(candidate, FOLDER_MODE if self.chmod is None else self.chmod)
                self._made(candidate)
            host = candidate
        return host

    def _place(self, path: str) -> str:
        """The host path for ``path``, its parent made and anything in its place removed."""
        parent = self.folder(os.path.dirname(path) or "/")
        host = os.path.join(parent, os.path.basename(path))
        if os.path.lexists(host) and not os.path.isdir(host) or os.path.islink(host):
            os.unlink(host)
        return host

    def entry(self, source: str, path: str) -> None:
        """Copy ``source`` (a host path) to ``path`` in the container."""
        self._entry_at(source, self._place(path))

    def _entry_at(self, source: str, host: str) -> None:
        info = os.lstat(source)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(source), host)
        elif stat.S_ISREG(info.st_mode):
            self._file(source, host, info)
        elif stat.S_ISDIR(info.st_mode):
            if not os.path.isdir(host):
                os.mkdir(host)
            os.chmod(host, stat.S_IMODE(info.st_mode) if self.chmod is None else self.chmod)
        else:
            return  # sockets, FIFOs and devices of a context are not copied
        if not stat.S_ISLNK(info.st_mode):
            os.utime(host, ns=(info.st_atime_ns, info.st_mtime_ns))
        self._made(host)

    def _file(self, source: str, host: str, info: os.stat_result) -> None:
        if os.path.isdir(host):
            raise CopyError(f"cannot copy {source} over the folder {os.path.relpath(host, self.root)}")
        with open_binary(source, follow_links=False) as reading:  # what lstat said: a regular file, still
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as writing:
                while chunk := reading.read(1 << 20):
                    writing.write(chunk)
        os.chmod(host, stat.S_IMODE(info.st_mode) if self.chmod is None else self.chmod)

    def tree(self, folder: str, target: str, source_root: SourceRoot, relative: str) -> None:
        """The contents of ``folder`` into ``target``, excluded paths left out. Without recursion
        and without resolving each path from the root again (a context may be any depth): a
        folder's entries go into the host folder made for it. A folder of the image that is a
        link to a folder is followed (inside the root), as Docker merges into it. The folders'
        times are set last, deepest first, as writing into a folder changes its time."""
        times: list[tuple[str, os.stat_result]] = []
        pending = [(folder, resolve_in_root(self.root, target), relative)]
        while pending:
            source, destination, inner = pending.pop()
            for met in listing(source_root, source, inner):
                host = self._slot(os.path.join(destination, met.entry.name), met.descend)
                if not met.excluded:
                    self._entry_at(met.entry.path, host)
                elif not os.path.isdir(host):
                    os.mkdir(host, FOLDER_MODE)  # on the way to what a "!" pattern includes
                    self._made(host)
                if met.descend:
                    pending.append((met.entry.path, host, met.path))
                    if not met.excluded:
                        times.append((host, met.entry.stat(follow_symlinks=False)))
        for host, info in reversed(times):
            os.utime(host, ns=(info.st_atime_ns, info.st_mtime_ns))

    def _slot(self, host: str, is_folder: bool) -> str:
        """Where an entry of a copied folder goes: ``host``, emptied of what may not stay there,
        or, for a folder over an image's link to a folder, the folder linked to (in the root)."""
        if os.path.islink(host):
            if is_folder:
                followed = resolve_in_root(self.root, "/" + os.path.relpath(host, self.root))
                if os.path.isdir(followed) and not os.path.islink(followed):
                    return followed
            os.unlink(host)
        elif os.path.lexists(host) and not os.path.isdir(host):
            os.unlink(host)
        return host

    def unpack(self, archive: str, target: str) -> None:
        """``ADD`` of a local archive: its entries under ``target``, with their owners."""
        name = os.path.basename(archive)
        try:
            with tarfile.open(archive) as tar:
                for member in tar:
                    try:
                        self._member(tar, member, target, name)
                    except OSError as e:
                        raise CopyError(f"cannot unpack {name}: entry {member.name!r}: {e.strerror}") from None
        except (tarfile.TarError, EOFError) as e:
            raise CopyError(f"cannot unpack {name}: {e}") from None
        except OSError as e:
            raise CopyError(f"cannot unpack {name}: {e.strerror}") from None

    def _member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, target: str, archive: str) -> None:
        try:
            relative = clean_path(member.name, archive)
        except UnsafeLayer as e:
            raise CopyError(str(e).replace("layer", "archive", 1)) from None
        if not relative:
            return
        path = os.path.join(target, relative)
        owner = self.owner or Owner(member.uid, member.gid)
        if member.isdir():
            host = self.folder(path)
            os.chmod(host, member.mode & 0o7777 | 0o700)
        elif member.issym():
            host = self._place(path)
            os.symlink(member.linkname, host)
        elif member.islnk():
            try:
                linked = resolve_in_root(self.root, os.path.join(target, clean_path(member.linkname, archive)))
            except UnsafeLayer as e:
                raise CopyError(str(e).replace("layer", "archive", 1)) from None
            if not os.path.lexists(linked) or os.path.isdir(linked) and not os.path.islink(linked):
                raise CopyError(f"cannot unpack {archive}: entry {member.name!r} is a hard link to "
                                f"{member.linkname!r}, which is no file the archive unpacked before it")
            host = self._place(path)
            os.link(linked, host, follow_symlinks=False)
        elif member.isreg():
            host = self._place(path)
            content = tar.extractfile(member)
            assert content is not None
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as writing:
                while chunk := content.read(1 << 20):
                    writing.write(chunk)
            os.chmod(host, member.mode & 0o7777 | 0o400)
        else:
            return  # devices and FIFOs: not in an unprivileged build
        if not member.issym():
            os.utime(host, (member.mtime, member.mtime), follow_symlinks=False)
        self._made(host, owner)
