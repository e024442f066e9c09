"""A place where a test user runs hydria, with settings that point inside it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.users import User, run_as


@dataclass
class Workspace:
    """A directory owned by ``user`` with ``cache/``, ``config/`` and ``out/``; hydria's settings
    point there, so tests never touch the user's real home configuration."""

    user: User
    root: Path
    hydria: str

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def unpacked(self) -> Path:
        """The read cache: images unpacked behind their containers (runtime/read_cache.py)."""
        return self.root / "unpacked"

    def env(self, **extra: str) -> dict[str, str]:
        return {"HYDRIA_CACHE_PATH": str(self.cache), "HYDRIA_CONFIG_PATH": str(self.root / "config"),
                "HYDRIA_DATA_PATH": str(self.root / "data"), "HYDRIA_SYSCONF_PATH": str(self.root / "etc"),
                "XDG_CACHE_HOME": str(self.root / "xdg-cache"), "HYDRIA_READ_CACHE_PATH": str(self.unpacked),
                # the same folders for a Slurm step, through the test cluster's site file (testbed/slurm.py)
                "HYDRIA_TESTBED_CACHE": str(self.cache), "HYDRIA_TESTBED_CONFIG": str(self.root / "config"),
                "HYDRIA_TESTBED_DATA": str(self.root / "data"), "HYDRIA_TESTBED_READ_CACHE": str(self.unpacked),
                "HYDRIA_ALLOW_HTTP": "y", **extra}

    def write_credentials(self, text: str) -> None:
        """The user's registry credentials (``config/.credentials``, netrc lines)."""
        path = self.root / "config" / ".credentials"
        path.write_text(text)
        os.chown(path, self.user.uid, self.user.gid)
        path.chmod(0o600)

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 300,
            **env: str) -> subprocess.CompletedProcess[str]:
        return run_as(self.user, [self.hydria, *args], env=self.env(**env), cwd=cwd or self.out,
                      timeout=timeout)

    def fill_store(self, store: Path, image: str, **env: str) -> None:
        """As the image store's owner: ``hydria store init`` of ``store``, then ``import`` of the
        registry image ``image`` (``REGISTRY#NAME:TAG``) into it. Raises AssertionError with what
        hydria said when either fails."""
        for action in (("init",), ("import", f"docker://{image}")):
            done = run_as(self.user, [self.hydria, "store", *action], env=self.env(HYDRIA_STORE_PATH=str(store), **env),
                          cwd=self.out)
            assert done.returncode == 0, done.stderr

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen([self.hydria, *args], user=self.user.uid, group=self.user.gid,
                                extra_groups=[], env=self.user.environment(self.env(**env)), cwd=self.out,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
