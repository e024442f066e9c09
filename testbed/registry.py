"""A real Docker registry (Debian's ``docker-registry``, distribution 2.x) on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

REGISTRY_BINARY = "docker-registry"

_CONFIG = """version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """Start with ``with Registry(directory) as registry:``; ``registry.address`` is HOST:PORT."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        binary = shutil.which(REGISTRY_BINARY)
        if binary is None:
            raise RuntimeError(f"{REGISTRY_BINARY} is not installed: run scripts/setup.sh")
        (self.directory / "storage").mkdir(parents=True, exist_ok=True)
        config = self.directory / "config.yml"
        config.write_text(_CONFIG.format(root=self.directory / "storage", port=self.port))
        log = (self.directory / "registry.log").open("wb")
        self._process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"registry exited: {(self.directory / 'registry.log').read_text()}")
            try:
                if httpx.get(f"http://{self.address}/v2/", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"registry on {self.address} did not answer within {timeout} s")

    def blob_fetches(self, repository: str) -> dict[str, int]:
        """How often each blob of ``repository`` was served (from the access log)."""
        counts: dict[str, int] = {}
        pattern = re.compile(rf'"GET /v2/{re.escape(repository)}/blobs/(sha256:[0-9a-f]{{64}}) HTTP/[0-9.]+" 200 ')
        for match in pattern.finditer((self.directory / "registry.log").read_text(errors="replace")):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
        return counts

    def stop(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
