"""Download progress: on a terminal, one live line per layer (bytes, rate, state); elsewhere,
one log line per finished layer, so batch logs stay readable."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

from hydria.log import INFO, Logger

log = Logger(__name__)
REDRAW_INTERVAL = 0.1


@dataclass
class _Layer:
    total: int
    done: int = 0
    state: str = "waiting"
    started: float = field(default_factory=time.monotonic)

    def line(self, digest: str) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        total = f"{self.total / 1e6:.1f}" if self.total >= 0 else "?"
        return (f"{digest[7:19]}  {self.done / 1e6:8.1f} / {total:>8} MB  "
                f"{self.done / 1e6 / elapsed:6.1f} MB/s  {self.state}")


class Progress:
    """Thread-safe; ``live`` draws on stderr (a terminal), otherwise finished layers are logged."""

    def __init__(self, live: bool | None = None) -> None:
        self.live = sys.stderr.isatty() and log.enabled_for(INFO) if live is None else live
        self._layers: dict[str, _Layer] = {}
        self._lock = threading.Lock()
        self._drawn = 0
        self._last = 0.0

    def start(self, digest: str, total: int) -> None:
        with self._lock:
            self._layers[digest] = _Layer(total, state="downloading")
            self._draw(force=True)

    def advance(self, digest: str, amount: int) -> None:
        with self._lock:
            self._layers[digest].done += amount
            self._draw()

    def finish(self, digest: str) -> None:
        with self._lock:
            layer = self._layers.get(digest)
            if layer is None:
                return  # another import downloaded it while this one waited
            layer.state = "done"
            if self.live:
                self._draw(force=True)
            else:
                log.info("%s", layer.line(digest))

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or not force and now - self._last < REDRAW_INTERVAL:
            return
        self._last = now
        lines = [layer.line(digest) for digest, layer in self._layers.items()]
        sys.stderr.write(f"\x1b[{self._drawn}F" if self._drawn else "")
        sys.stderr.write("".join(f"\x1b[2K{line}\n" for line in lines))
        sys.stderr.flush()
        self._drawn = len(lines)
