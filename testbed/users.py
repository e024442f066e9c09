"""Ordinary users for runtime tests: hydria must be tested as a user, not as root.

``scripts/setup.sh`` creates them (as root); :func:`run_as` runs a command as one of them with a
clean login-like environment, so nothing of root's environment leaks into the test.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TEST_USERS = ("hydria-test", "hydria-test2")
# A Slurm built from SchedMD's source and installed under this prefix, whose clients the tests'
# users run (docs/slurm.md, "Slurm releases"); the daemons and root's own commands take it from
# the PATH the tests run with, which must start with its bin and sbin too.
SLURM_PREFIX = os.environ.get("HYDRIA_TEST_SLURM_PREFIX")
STORE_USER = "hydria-store"  # the account that writes the image store in tests


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def lookup(cls, name: str) -> User:
        """Raises KeyError when the user does not exist (run scripts/setup.sh)."""
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a login gives this user, plus the directory of this Python's tools on PATH."""
        tools = str(Path(sys.executable).parent)
        slurm = f"{SLURM_PREFIX}/bin:" if SLURM_PREFIX else ""
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
               "PATH": f"{tools}:{slurm}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
               "TMPDIR": "/tmp"}
        env.update(extra or {})
        return env


def run_as(user: User, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
           cwd: Path | None = None, input: str | None = None, timeout: float = 300,
           check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` (no supplementary groups) and capture its output as text."""
    if os.geteuid() != 0:
        raise PermissionError("run_as needs root to switch users; run the tests as root")
    return subprocess.run(
        list(argv), user=user.uid, group=user.gid, extra_groups=[], env=user.environment(env),
        cwd=cwd or user.home, input=input, capture_output=True, text=True, timeout=timeout,
        check=check,
    )


def live_processes(user: User, wait: float = 10) -> list[str]:
    """The user's processes that are not zombies, after waiting up to ``wait`` seconds for none."""
    deadline = time.monotonic() + wait
    while True:
        listing = subprocess.run(["ps", "-u", str(user.uid), "-o", "stat=,args="], capture_output=True,
                                 text=True, check=False).stdout
        alive = [line for line in listing.splitlines() if not line.startswith("Z")]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)
