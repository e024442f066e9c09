"""``hydria install-reader``: compile hydria's squashfs reader (squashfs_reader.c) against this
node's libsquashfuse and libfuse 3, and put it where starts look for it (runtime/reader.py)."""

from __future__ import annotations

import os
from pathlib import Path

from hydria.errors import HydriaError
from hydria.runtime.reader import reader_path
from hydria.tools import ToolFailed, run_tool

SOURCE = Path(__file__).parent / "squashfs_reader.c"
LIBRARIES = ("squashfuse_ll", "fuse3")
# Libraries the reader uses where they are there, and the macro that tells it so: with libzstd
# it keeps one zstd context where the library makes one per block (squashfs_reader.c).
OPTIONAL_LIBRARIES = {"libzstd": "-DHYDRIA_ZSTD"}
DEVELOPMENT_PACKAGES = ("install libsquashfuse's and libfuse 3's development files: Debian, Ubuntu: "
                        "libsquashfuse-dev libfuse3-dev pkg-config gcc (and libzstd-dev); RHEL (EPEL): "
                        "squashfuse-devel fuse3-devel pkgconf gcc (and libzstd-devel)")


def install_reader() -> Path:
    """Build the reader into ``reader_path()``, replacing an older one atomically (running
    containers keep theirs). Raises MissingTool, ToolFailed."""
    flags = run_tool(["pkg-config", "--cflags", "--libs", *LIBRARIES],
                     "cannot find the libraries the reader is built with", hint=DEVELOPMENT_PACKAGES).split()
    # A library built from source (squashfuse 0.5 and newer, for threads) often lives where the
    # loader does not look (/opt/...): the reader keeps the folder pkg-config found it in. Only
    # there: with a run path, the loader tries a dozen folders below it for each of the reader's
    # libraries on every start (about 120 failed opens and stats) before the one in its cache.
    library_folder = run_tool(["pkg-config", "--variable=libdir", LIBRARIES[0]], "cannot find libsquashfuse_ll").strip()
    if os.path.realpath(library_folder) not in loader_cache_folders():
        flags.append(f"-Wl,-rpath,{library_folder}")
    for library, macro in OPTIONAL_LIBRARIES.items():
        try:
            flags += [macro, *run_tool(["pkg-config", "--cflags", "--libs", library], library).split()]
        except ToolFailed:
            pass  # built without: the library's own way
    target = Path(reader_path())
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.new")
    try:
        run_tool(["gcc", "-O2", "-Wall", "-o", str(staging), str(SOURCE), *flags],
                 f"cannot compile {SOURCE}", hint=DEVELOPMENT_PACKAGES)
        staging.chmod(0o755)
        staging.rename(target)
    except (HydriaError, OSError):
        staging.unlink(missing_ok=True)
        raise
    return target


def loader_cache_folders() -> set[str]:
    """The folders (links resolved: /lib is /usr/lib where /usr is merged) of the libraries in
    the dynamic loader's cache (``ldconfig -p``), which the loader finds without a run path; none
    where ldconfig is not at hand."""
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            listing = run_tool([ldconfig, "-p"], "cannot read the loader's cache")
        except (HydriaError, OSError):
            continue
        return {os.path.realpath(os.path.dirname(line.rpartition(" => ")[2].strip()))
                for line in listing.splitlines() if " => " in line}
    return set()
