"""The node's kernel and tools: user namespaces, the kernel's version, /dev/fuse, the programs hydria runs."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

from hydria import apparmor
from hydria.digits import is_number
from hydria.doctor.report import Check
from hydria.runtime.reader import (
    WITHOUT_FUSE,
)

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


def check_user_namespaces() -> Check:
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


def kernel_version() -> tuple[int, ...]:
    return tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2] if is_number(part))


def check_kernel() -> Check:
    release = platform.release()
    if kernel_version() >= OVERLAY_IN_USERNS:
        return Check("kernel", "ok", f"{release}: overlayfs in user namespaces")
    return Check("kernel", "warn", f"{release}: older than 5.11, no overlayfs in user namespaces",
                 "containers use fuse-overlayfs instead (install it); Linux 5.11 or newer is faster")


def check_fuse_device() -> Check:
    if not os.path.exists("/dev/fuse"):
        return Check("/dev/fuse", "fail", "missing", f"as root: modprobe fuse; {WITHOUT_FUSE}")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return Check("/dev/fuse", "fail", f"not usable by this user (mode {os.stat('/dev/fuse').st_mode & 0o777:04o})",
                     f"as root: chmod 0666 /dev/fuse (Debian's default; a udev rule keeps it); {WITHOUT_FUSE}")
    return Check("/dev/fuse", "ok", "usable")


def check_tool(program: str, package: str, needed_for: str | None) -> Check:
    path = shutil.which(program)
    if path:
        return Check(program, "ok", path)
    if needed_for is None:
        return Check(program, "skip", "not installed (optional)", f"install the Debian package {package}")
    return Check(program, "fail", f"not installed: needed for {needed_for}", f"install the Debian package {package}")


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
