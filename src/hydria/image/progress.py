"""Import progress, for every phase: downloads, the merge of the layers, the squashfs.

On a terminal, a block of live lines redrawn at most ten times a second, each cut to the
terminal's width and the block to its height (so nothing wraps and the redraw never climbs past
the top): one line per blob (size, its own rate, state; a finished blob keeps the rate it had), a
total line (blobs done, bytes, rate, time left), and the squash line (bytes merged into the
image, elapsed time). A log line written meanwhile appears above the block (log.py erases the
block first and draws it again after). Elsewhere (a batch log, a pipe): one log line per blob
done, and one when the squash starts and ends.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

from hydria import log as logging_
from hydria.log import INFO, Logger
from hydria.units import format_size

log = Logger(__name__)
REDRAW_INTERVAL = 0.1


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclass
class _Blob:
    total: int
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def rate(self) -> float:
        return self.done / max((self.finished or time.monotonic()) - self.started, 1e-3)

    def line(self, digest: str) -> str:
        """Most telling first, for a narrow terminal: the blob, done or how far, sizes, rate."""
        size = f"{format_size(self.done)} / {format_size(self.total)}" if self.total >= 0 else format_size(self.done)
        if self.finished is not None:
            state = "done"
        else:
            state = f"{100 * self.done // self.total}%" if self.total > 0 else "..."
        return f"{digest[7:19]}  {state:<4}  {size:>21}  {format_size(self.rate()):>9}/s"


@dataclass
class _Squash:
    started: float = field(default_factory=time.monotonic)
    merged: int = 0
    merge_ended: float | None = None
    ended: float | None = None

    def line(self) -> str:
        now = self.ended or time.monotonic()
        if self.ended is not None:
            return f"Squashed {format_size(self.merged)} in {_duration(now - self.started)}"
        what = "compressing the last blocks" if self.merge_ended is not None else "merging the layers"
        return f"Squashing: {format_size(self.merged)} merged, {_duration(now - self.started)}, {what}"


class Progress:
    """Thread-safe; ``live`` draws on stderr (a terminal), otherwise it logs lines."""

    def __init__(self, live: bool | None = None) -> None:
        self.live = sys.stderr.isatty() and log.enabled_for(INFO) if live is None else live
        self._blobs: dict[str, _Blob] = {}
        self._squash: _Squash | None = None
        self._lock = threading.RLock()
        self._drawn = 0
        self._last = 0.0
        if self.live:
            logging_.set_live_area(self)

    # --- downloads (from the download threads) ---

    def start(self, digest: str, total: int, *, shown: bool = True) -> None:
        """A blob's download begins; one not ``shown`` (an image's config: no layer, and fetched
        before the layers are counted) is left out of every line."""
        if not shown:
            return
        with self._lock:
            self._blobs[digest] = _Blob(total)
            self._draw(force=True)

    def advance(self, digest: str, amount: int) -> None:
        with self._lock:
            blob = self._blobs.get(digest)
            if blob is None:
                return  # not shown
            blob.done += amount
            self._draw()

    def finish(self, digest: str) -> None:
        with self._lock:
            blob = self._blobs.get(digest)
            if blob is None:
                return  # another import downloaded it while this one waited
            blob.finished = time.monotonic()
            if self.live:
                self._draw(force=True)
            else:
                log.info("%s", blob.line(digest))

    # --- the squash (from the importer) ---

    def squashing(self) -> None:
        with self._lock:
            self._squash = _Squash()
            if self.live:
                self._draw(force=True)
            else:
                log.info("Squashing the image...")

    def merged(self, amount: int) -> None:
        with self._lock:
            if self._squash is not None:
                self._squash.merged += amount
                self._draw()

    def merge_ended(self) -> None:
        with self._lock:
            if self._squash is not None:
                self._squash.merge_ended = time.monotonic()
                self._draw(force=True)

    def squashed(self) -> None:
        with self._lock:
            if self._squash is None:
                return
            self._squash.ended = time.monotonic()
            if self.live:
                self._draw(force=True)
            else:
                log.info("%s", self._squash.line())

    def close(self) -> None:
        """The last drawing stays on the terminal; log lines go on below it."""
        with self._lock:
            if self.live:
                self._draw(force=True)
                logging_.set_live_area(None)
                self.live = False

    # --- the block on the terminal (also called by log.py around a log line) ---

    def erase(self) -> None:
        with self._lock:
            if self._drawn:
                sys.stderr.write(f"\x1b[{self._drawn}F\x1b[J")
                self._drawn = 0

    def redraw(self) -> None:
        with self._lock:
            self._draw(force=True)

    def _lines(self, width: int, height: int) -> list[str]:
        lines = []
        if self._blobs:
            blobs = list(self._blobs.items())
            shown = blobs
            room = max(height - 3, 1)  # the total and squash lines, and the cursor's own line
            if len(blobs) > room:  # the ones downloading first, then the latest done
                running = [b for b in blobs if b[1].finished is None]
                shown = (running + [b for b in reversed(blobs) if b[1].finished is not None])[:room]
                shown.sort(key=lambda item: item[1].started)
            lines += [blob.line(digest) for digest, blob in shown]
            lines.append(self._total())
        if self._squash is not None:
            lines.append(self._squash.line())
        return [line[:max(width - 1, 10)] for line in lines]

    def _total(self) -> str:
        blobs = self._blobs.values()
        done = sum(b.done for b in blobs)
        total = sum(max(b.total, b.done) for b in blobs)
        finished = sum(b.finished is not None for b in blobs)
        active = [b for b in blobs if b.finished is None]
        rate = sum(b.rate() for b in active)
        if not active:
            return f"Downloaded {finished}/{len(self._blobs)}, {format_size(done)}"
        left = f", {_duration((total - done) / rate)} left" if rate > 0 and total > done else ""
        return f"Downloading {finished}/{len(self._blobs)} done, {format_size(done)} of {format_size(total)}, {format_size(rate)}/s{left}"

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or not force and now - self._last < REDRAW_INTERVAL:
            return
        self._last = now
        try:
            size = os.get_terminal_size(sys.stderr.fileno())
            width, height = size.columns, size.lines
        except (OSError, ValueError):
            width, height = 80, 24
        lines = self._lines(width, height)
        try:
            sys.stderr.write((f"\x1b[{self._drawn}F" if self._drawn else "") + "\x1b[J")
            sys.stderr.write("".join(f"{line}\n" for line in lines))
            sys.stderr.flush()
        except (OSError, ValueError):
            return  # standard error closed
        self._drawn = len(lines)
