"""Which program serves an image file read-only: hydria's own squashfs reader where it is
installed (``hydria install-reader`` builds it next to this installation) and not turned off
(``HYDRIA_FAST_READER``), otherwise squashfuse. Both take squashfuse's command line.

The reader links squashfuse's low-level library and reads small files and Python imports several
times faster than the high-level ``squashfuse`` program (docs/performance.md: READDIRPLUS, no
open requests, no xattr requests, the owner mapped in the daemon)."""

from __future__ import annotations

import os
import sys

from hydria.errors import MissingTool

READER = "hydria-squashfuse"
FALLBACK = "squashfuse"
# What a user can do at once where /dev/fuse cannot be used (doctor/host.py says it too).
WITHOUT_FUSE = ("until then, a container unpacked into a folder needs none: hydria create --unpack IMAGE, then "
                "hydria start NAME (HYDRIA_UNPACK=y unpacks at every create)")


def reader_path() -> str:
    """Where ``hydria install-reader`` puts the reader: ``libexec/hydria`` of the Python
    installation (the virtual environment) that runs hydria."""
    return os.path.join(sys.prefix, "libexec", "hydria", READER)


def installed_reader() -> str | None:
    """The reader's path when it is installed and executable, else None."""
    path = reader_path()
    return path if os.access(path, os.X_OK) and os.path.isfile(path) else None


def find_program(name: str) -> str | None:
    """``name``'s path on PATH, as ``shutil.which`` (whose import a start would pay for)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def squashfs_server(fast: bool) -> str:
    """The program that will serve an image: the reader when ``fast`` and installed, else
    squashfuse. Raises MissingTool when neither is there."""
    if fast:
        reader = installed_reader()
        if reader is not None:
            return reader
    binary = find_program(FALLBACK)
    if binary is None:
        raise MissingTool(FALLBACK, hint="install the Debian package squashfuse, or build hydria's reader: "
                                         "hydria install-reader")
    return binary
