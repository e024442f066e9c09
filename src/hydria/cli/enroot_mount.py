"""``enroot-mount [--root DIR] [--pass N] FSTAB...``: the mount program that enroot's hooks call.

Hook scripts (enroot's own device, nvidia and mellanox hooks, and the site hooks copied from them)
mount with ``enroot-mount --root "$ENROOT_ROOTFS" -`` and fstab lines on stdin. hydria puts a
program of that name first on its hooks' ``PATH`` (hooks/scripts.py); it performs the entries of
pass ``N`` (default 0) with hydria's own mount code, so targets stay inside ``DIR`` (default
``/``), in the container's mount namespace, with the capabilities hooks run with.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = "Usage: enroot-mount [--root DIR] [--pass NUM] FSTAB...   (FSTAB '-': standard input)"


def main(argv: Sequence[str]) -> int:
    import os

    from hydria.errors import HydriaError
    from hydria.runtime import fstab
    from hydria.runtime.mounts import mount_entries

    arguments = list(argv)
    root, passno = "/", 0
    while len(arguments) >= 2 and arguments[0] in ("--root", "--pass"):
        option, value = arguments[:2]
        del arguments[:2]
        if option == "--root":
            root = value
            continue
        try:
            passno = int(value)
        except ValueError:
            print(f"enroot-mount: invalid argument: {value}", file=sys.stderr)
            return 1
    if not arguments or arguments[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        for name in arguments:
            text = sys.stdin.read() if name == "-" else _read(name)
            mount_entries(fstab.parse(text, "standard input" if name == "-" else name),
                          os.path.realpath(root), passno, os.getcwd())
    except HydriaError as e:
        print(f"enroot-mount: {e.message}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"enroot-mount: failed to open: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
