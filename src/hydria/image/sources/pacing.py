"""Layer downloads started in merge order, as many at once as the merge needs.

Downloading every layer at once (up to ``HYDRIA_MAX_CONNECTIONS``) gets the bytes fastest when
the network is the bottleneck. When it is not (a registry nearby, a node with few cores), the
downloads of the lower layers take CPU from the merge and squash of the top one, and their data is
read back long after it was written (docs/import.md has the figures). So downloads start one at a
time, top layer first, and the number that run at once grows by one each time the merge has waited
for downloaded data for :data:`STARVED` seconds in all while the node's CPUs were idle for at least
:data:`IDLE_ENOUGH` of the time, or has waited :data:`LONG_WAIT` at once (a registry's latency: a
CPU-bound merge waits milliseconds at a time), up to the limit. Either way it is the network that holds the merge back.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

STARVED = 0.1  # seconds the merge waits for data before one more download runs at once
IDLE_ENOUGH = 0.3  # the share of CPU time the node left idle meanwhile, for one more
LONG_WAIT = 0.05  # a wait this long is the network's, however busy the node


def cpu_times() -> tuple[int, int]:
    """The node's (idle, total) CPU time so far, in ticks (``/proc/stat``; iowait counts as idle)."""
    with open("/proc/stat", "rb") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    return ticks[3] + ticks[4], sum(ticks[:8])  # guest time is in user time already


class DownloadQueue:
    """Starts downloads (``start(key)``, which must not block) in the order they were added.

    Thread-safe: the merge reports its waits (:meth:`waited`) and the blob it opens
    (:meth:`need`), the downloads their ends (:meth:`ended`).
    """

    def __init__(self, start: Callable[[str], None], limit: int,
                 cpu: Callable[[], tuple[int, int]] = cpu_times) -> None:
        self._start = start
        self._cpu = cpu
        self._cpu_then = (0, 0)  # since the first add: before, the node waited for the manifest
        self._limit = limit if limit > 0 else 1 << 30
        self._queued: deque[str] = deque()
        self._running = 0
        self._width = 1  # downloads to keep running at once
        self._waited = 0.0  # seconds the merge waited since the width last grew
        self._closed = False
        self._lock = threading.Lock()

    @property
    def width(self) -> int:
        return self._width

    def add(self, keys: Iterable[str]) -> None:
        with self._lock:
            if not self._cpu_then[1]:
                self._cpu_then = self._cpu()
            self._queued.extend(keys)
            self._fill()

    def need(self, key: str) -> None:
        """The merge opens ``key``: start it now if it is still queued (the limit still holds:
        ``start`` may queue it behind running downloads)."""
        with self._lock:
            if key in self._queued and not self._closed:
                self._queued.remove(key)
                self._running += 1
                self._start(key)

    def waited(self, seconds: float) -> None:
        """The merge waited ``seconds`` for data: the downloads are slower than the merge; one
        more at once helps if it is the network that holds them back, not the CPU."""
        with self._lock:
            self._waited += seconds
            if self._width >= self._limit or (self._waited < STARVED and seconds < LONG_WAIT):
                return
            (idle, total), (idle_then, total_then) = self._cpu(), self._cpu_then
            self._cpu_then, self._waited = (idle, total), 0.0
            idle_share = (idle - idle_then) / (total - total_then) if total > total_then else 0.0
            if seconds >= LONG_WAIT or idle_share >= IDLE_ENOUGH:
                self._width += 1
                self._fill()

    def ended(self) -> None:
        with self._lock:
            self._running -= 1
            self._fill()

    def close(self) -> None:
        """Start nothing more."""
        with self._lock:
            self._closed = True
            self._queued.clear()

    def _fill(self) -> None:
        while self._queued and self._running < self._width and not self._closed:
            self._running += 1
            self._start(self._queued.popleft())
