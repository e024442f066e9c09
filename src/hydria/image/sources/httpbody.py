"""A blob's body read straight from the connection.

httpx hands a body over through h11, which copies each byte three times on the way (into its
receive buffer, out as a slice, into ``bytes``): on layers of gigabytes, that and the buffer
traffic it causes were the largest share of the download's CPU time after hashing. With a
Content-Length and no content coding, the bytes the parser already holds are taken from it once
and the rest is read from the connection's stream (the ``network_stream`` extension httpcore gives
every HTTP/1.1 response), one copy. The connection is closed afterwards rather than reused: its
parser did not see the body.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpcore
import httpx

from hydria.digits import is_number

CHUNK = 1 << 20
# A download that gets fewer than LOW_SPEED bytes in a window of seconds is cut, as curl's
# low-speed limit does for enroot (docs/import.md, "Slow and stalled registries").
LOW_SPEED = 1024


class Pace:
    """The bounds of a download besides its read timeout: ``timeout`` seconds in all (from
    ``started``, across resumed tries; 0: none), and at least LOW_SPEED bytes each ``window``
    seconds, so that a server that trickles a byte now and then cannot keep it going for ever."""

    def __init__(self, timeout: int, window: float, started: float | None = None) -> None:
        now = time.monotonic()
        self.timeout = timeout
        self.window = window
        self.deadline = (started or now) + timeout if timeout else None
        self._window_start, self._window_bytes = now, 0

    def too_slow(self, count: int) -> str | None:
        """Count ``count`` bytes more; why the download must end now, or None."""
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline:
            return f"took longer than HYDRIA_TRANSFER_TIMEOUT ({self.timeout} s)"
        self._window_bytes += count
        if now - self._window_start >= self.window:
            if self._window_bytes < LOW_SPEED:
                return f"fewer than {LOW_SPEED} bytes in {self.window:g} s"
            self._window_start, self._window_bytes = now, 0
        return None


def body_chunks(response: httpx.Response) -> Iterator[bytes]:
    """The body of a streamed ``response``, as it arrives.

    Raises:
        httpx.TransportError: the connection broke, stalled (no data for the client's read timeout)
            or ended before the body did.
    """
    stream = response.extensions.get("network_stream")
    length = response.headers.get("Content-Length", "")
    coded = response.headers.get("Content-Encoding", "identity").lower() != "identity"
    if stream is None or not is_number(length) or coded or "Transfer-Encoding" in response.headers:
        yield from response.iter_bytes()
        return
    remaining = int(length)
    stall = response.request.extensions.get("timeout", {}).get("read")  # the client's read timeout
    parsed = response.iter_raw()
    try:
        if remaining:
            # All the parser holds (or, when it holds nothing, one read): its buffer is empty after.
            first = next(parsed, b"")
            remaining -= len(first)
            yield first
        while remaining > 0:
            try:
                data = stream.read(min(CHUNK, remaining), stall)
            except (httpcore.NetworkError, httpcore.TimeoutException) as error:
                raise httpx.ReadError(str(error) or type(error).__name__) from None
            if not data:
                raise httpx.RemoteProtocolError(f"the server closed the connection {remaining} bytes "
                                                "before the end of the body")
            remaining -= len(data)
            yield data
    finally:
        response.close()  # closes the connection: its parser still expects the body
