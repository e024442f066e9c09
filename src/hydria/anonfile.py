"""Files that get their name only once complete, so a crash or kill never leaves a partial one.

On file systems with ``O_TMPFILE`` (ext4, xfs, btrfs, tmpfs) the file has no name until
:meth:`AnonymousFile.commit` links it; a killed process leaves nothing at all. Elsewhere (NFS,
Lustre) a hidden ``.NAME.NODE.PID.RANDOM.partial`` file is used and removed unless committed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hydria.paths import hidden_sibling, process_tag


@dataclass
class AnonymousFile:
    fd: int
    target: Path
    partial: Path | None  # the fallback's temporary name, None with O_TMPFILE

    @property
    def path(self) -> str:
        """A path another process can open to write the file (it must inherit ``fd``)."""
        return str(self.partial) if self.partial else f"/proc/self/fd/{self.fd}"

    def commit(self) -> bool:
        """Give the file its name; False (and no change) when the name is already taken."""
        try:
            if self.partial:
                os.link(self.partial, self.target)
            else:
                # Plain os.link uses link(2), which would link the /proc symlink itself; passing a
                # directory fd makes it use linkat(AT_SYMLINK_FOLLOW), which links the inode.
                directory = os.open(self.target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.link(f"/proc/self/fd/{self.fd}", self.target, src_dir_fd=directory,
                            follow_symlinks=True)
                finally:
                    os.close(directory)
        except FileExistsError:
            return False
        return True


@contextmanager
def anonymous_file(target: Path, mode: int = 0o644) -> Iterator[AnonymousFile]:
    """A writable file (``fd`` open read-write) in ``target``'s directory, named on commit."""
    partial = None
    try:
        fd = os.open(target.parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        import secrets  # here: only file systems without O_TMPFILE pay for its import

        # An unpredictable name, made new (O_EXCL follows no link): the directory may be shared.
        partial = target.with_name(hidden_sibling(target.name, process_tag(), secrets.token_hex(8), "partial"))
        fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        yield AnonymousFile(fd, target, partial)
    finally:
        os.close(fd)
        if partial is not None:
            partial.unlink(missing_ok=True)


def hardlinked(source: str | Path, target: Path) -> bool:
    """Whether ``target`` was made a hardlink of ``source``; False where none can be made (another
    file system, another user's file under protected_hardlinks).

    Raises:
        FileExistsError: ``target`` exists.
        FileNotFoundError: ``source`` does not.
    """
    try:
        os.link(source, target)
        return True
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError:
        return False


def link_or_copy(source: str | Path, target: Path) -> None:
    """Make ``target`` the same file as ``source``: a hardlink, or where none can be made (another
    file system, another user's file under protected_hardlinks) a copy with the same modification
    time, which gets its name only once complete.

    Raises:
        FileExistsError: ``target`` exists.
        FileNotFoundError: ``source`` does not.
    """
    if hardlinked(source, target):
        return
    import shutil  # here: starts of named containers spare it

    with anonymous_file(target) as copy:
        shutil.copy2(source, copy.path)  # copy_file_range or sendfile: a reflink where the file system can
        if not copy.commit():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
