"""The IDs a build step's user namespace maps.

Where the user has subordinate IDs (``/etc/subuid``, ``/etc/subgid``) and the system's setuid
helpers ``newuidmap``/``newgidmap`` (package uidmap, shadow-utils), a build maps them as podman's
rootless builds do: the user is root of the namespace, container IDs 1..N are the subordinate
ones, so ``chown``, package managers' service users and set-id files come out as in Docker. The
files a step makes then belong on the host to subordinate IDs the user cannot read or remove
directly: what reads or removes them runs in such a namespace too (:meth:`IdMap.run`).
Otherwise one ID is mapped (the user is root, every file belongs to root: docs/build.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable

from hydria.apparmor import namespace_error
from hydria.errors import HydriaError
from hydria.record import Record
from hydria.runtime import syscalls as sc

SUBUID, SUBGID = "/etc/subuid", "/etc/subgid"


def subordinate_range(text: str, name: str, number: int) -> tuple[int, int] | None:
    """The first range (start, count) that a subuid/subgid file's ``text`` gives the user
    ``name`` (or ``number``); None where it gives none."""
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) != 3 or fields[0] not in (name, str(number)):
            continue
        try:
            start, count = int(fields[1]), int(fields[2])
        except ValueError:
            continue
        if start > 0 and count > 0:
            return start, count
    return None


class IdMap(Record):
    """Container root is ``uid``/``gid``; container IDs 1.. are the ranges from ``uid_start``/``gid_start``."""

    uid: int
    gid: int
    uid_start: int
    uid_count: int
    gid_start: int
    gid_count: int

    def describe(self) -> str:
        return f"root and {min(self.uid_count, self.gid_count)} subordinate IDs mapped ({SUBUID}, {SUBGID})"

    def fork(self) -> int:
        """``fork()``; the child is in a new user namespace with this mapping (made by newuidmap
        and newgidmap, run here) and a mount namespace of its own. Returns the child's PID, 0 in
        the child. Raises HydriaError (here) when the mapping cannot be made."""
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_r)
                os.close(go_w)
                sc.unshare(sc.CLONE_NEWUSER | sc.CLONE_NEWNS)
                sc.mount(None, "/", None, sc.MS_REC | sc.MS_SLAVE)  # fails where AppArmor gives no capabilities
                os.write(ready_w, b"1")
                os.close(ready_w)
                if os.read(go_r, 1) != b"1":
                    os._exit(125)
                os.close(go_r)
                os.setgroups([])  # the host's supplementary groups would show as nobody
            except BaseException:  # noqa: BLE001  a child must never return into the parent's code
                os._exit(125)
            return 0
        os.close(ready_w)
        os.close(go_r)
        try:
            if os.read(ready_r, 1) != b"1":
                os.waitpid(pid, 0)
                raise namespace_error("cannot create the build's user namespace")
            self._map(pid)
            os.write(go_w, b"1")
        except BaseException:
            os.close(go_w)  # the child ends without a mapping
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(ready_r)
        os.close(go_w)
        return pid

    def _map(self, pid: int) -> None:
        for tool, inner, start, count in (("newuidmap", self.uid, self.uid_start, self.uid_count),
                                          ("newgidmap", self.gid, self.gid_start, self.gid_count)):
            result = subprocess.run([tool, str(pid), "0", str(inner), "1", "1", str(start), str(count)],
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise HydriaError(f"{tool} refused the mapping of your subordinate IDs "
                                  f"({result.stderr.strip() or f'exit status {result.returncode}'})",
                                  hint=f"an administrator can check your lines in {SUBUID} and {SUBGID}")

    def run(self, work: Callable[[], object]) -> object:
        """``work()`` in a child in a namespace of this mapping, as its root (to read and remove
        what steps made); what it returns (JSON), or the HydriaError or OSError it raised."""
        reader, writer = os.pipe()
        pid = self.fork()
        if pid == 0:
            os.close(reader)
            try:
                answer = {"value": work()}
            except HydriaError as e:
                answer = {"error": e.message, "hint": e.hint}
            except OSError as e:
                answer = {"error": f"{e.strerror}: {e.filename}", "hint": None}
            except BaseException as e:  # noqa: BLE001  a child must never return into the parent's code
                answer = {"error": repr(e), "hint": None}
            with open(writer, "w") as handle:
                json.dump(answer, handle)
            os._exit(0)
        os.close(writer)
        with open(reader) as handle:
            text = handle.read()
        os.waitpid(pid, 0)
        answer = json.loads(text) if text else {"error": "the build's helper process died", "hint": None}
        if "error" in answer:
            raise HydriaError(str(answer["error"]), hint=str(answer["hint"]) if answer["hint"] else None)
        return answer["value"]


def find(name: str, uid: int, gid: int) -> IdMap | None:
    """The full mapping for the user, where the system gives them subordinate IDs and the tools
    to map them; None: one ID."""
    if uid == 0 or not (shutil.which("newuidmap") and shutil.which("newgidmap")):
        return None
    ranges = []
    for path in (SUBUID, SUBGID):
        try:
            with open(path) as handle:
                found = subordinate_range(handle.read(), name, uid)  # both files name the user
        except OSError:
            return None
        if found is None:
            return None
        ranges.append(found)
    (uid_start, uid_count), (gid_start, gid_count) = ranges
    return IdMap(uid, gid, uid_start, uid_count, gid_start, gid_count)


def of_this_user(enabled: bool) -> IdMap | None:
    """The mapping for the user running hydria (``HYDRIA_BUILD_SUBORDINATE_IDS``: ``enabled``)."""
    import pwd

    if not enabled:
        return None
    account = pwd.getpwuid(os.getuid())
    return find(account.pw_name, account.pw_uid, account.pw_gid)
