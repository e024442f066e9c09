"""Which named containers are running, and as which processes.

No registry is kept (nothing to go stale): the user's processes are grouped by mount namespace,
and a namespace belongs to container NAME when its root mount is NAME's overlay (its upperdir is
``DATA/NAME/upper``, the kernel's or fuse-overlayfs's) or, for an unpacked container, NAME's ``rootfs`` directory itself. Each
namespace is represented by its lowest PID, which is the container's first process.
"""

from __future__ import annotations

import os
import time

from hydria.container.named import ROOTFS
from hydria.digits import is_number
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import mountinfo
from hydria.runtime.fstab import unescape

if TYPE_CHECKING:
    from pathlib import Path


class RunningProcess(Record):
    pid: int
    mount_namespace: str
    user_namespace: str


UNKNOWN = "<unknown>"  # enroot's name for a running container that is not in the data path


def running(containers: dict[str, str | Path], runtime_path: str) -> dict[str, list[RunningProcess]]:
    """The running processes of each container, given as name -> its directory in the data path
    (lowest PID of each mount namespace, in PID order), and as :data:`UNKNOWN` those of containers
    started from image files (their overlay's upper directory is a start's own in
    ``runtime_path``). Containers not running are left out."""
    uppers = {os.path.join(path, "upper"): name for name, path in containers.items()}
    trees = {}
    for name, path in containers.items():
        try:
            info = os.stat(os.path.join(path, ROOTFS))
            trees[(info.st_dev, info.st_ino)] = name
        except OSError:
            continue
    found: dict[str, list[RunningProcess]] = {}
    for pid, namespace in mountinfo.other_namespaces():
        owner = _owner(pid, uppers, trees, runtime_path)
        if owner is not None:
            found.setdefault(owner, []).append(RunningProcess(pid, namespace, mountinfo.link(pid, "ns/user") or ""))
    return found


def _owner(pid: int, uppers: dict[str, str], trees: dict[tuple[int, int], str], runtime_path: str) -> str | None:
    try:
        with open(f"/proc/{pid}/mountinfo") as handle:
            lines = handle.read().splitlines()
        root = os.stat(f"/proc/{pid}/root")
    except OSError:  # gone meanwhile
        return None
    if (root.st_dev, root.st_ino) in trees:
        return trees[(root.st_dev, root.st_ino)]
    for line in lines:
        fields = line.split(" - ", 1)
        if len(fields) != 2 or fields[0].split()[4] != "/":
            continue
        for option in mountinfo.own_options(line):
            if option.startswith("upperdir="):
                upper = unescape(option.removeprefix("upperdir="))
                if upper in uppers:
                    return uppers[upper]
                start_area = os.path.dirname(upper)
                if os.path.basename(upper) == "upper" and os.path.dirname(start_area) == runtime_path \
                        and is_number(os.path.basename(start_area).rpartition(".")[2]):  # NODE.PID
                    return UNKNOWN
    return None


def describe(pid: int) -> dict[str, str] | None:
    """ps-style columns of a process (COMM, STATE, STARTED, TIME, COMMAND); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) // ticks
    days, rest = divmod(cpu, 86400)
    started = _boot_time() + int(fields[19]) / ticks
    stamp = time.strftime("%H:%M:%S" if time.time() - started < 86400 else "%b %d", time.localtime(started))
    return {"COMM": comm, "STATE": fields[0], "STARTED": stamp,
            "TIME": f"{f'{days}-' if days else ''}{rest // 3600:02}:{rest % 3600 // 60:02}:{rest % 60:02}",
            "COMMAND": command or f"[{comm}]"}


def _boot_time() -> int:
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith("btime "):
                return int(line.split()[1])
    return 0
