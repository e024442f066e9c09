"""Forwarding a request to the test registry, for the fronts that tests put before it
(:mod:`testbed.authproxy`, :mod:`testbed.breakingproxy`)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import httpx

REQUEST_HEADERS = ("accept", "range")
ANSWER_HEADERS = ("Content-Type", "Docker-Content-Digest", "Content-Length", "Content-Range")


def forward(handler: BaseHTTPRequestHandler, upstream: str, method: str, *,
            request_headers: tuple[str, ...] = REQUEST_HEADERS, limit: int | None = None) -> bool:
    """Answer ``handler``'s request with ``upstream``'s answer. With ``limit``, a longer body
    stops after that many bytes and the connection closes, as when a network breaks: True then."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() in request_headers}
    with httpx.stream(method, f"http://{upstream}{handler.path}", headers=headers, timeout=60) as response:
        handler.send_response(response.status_code)
        for key in ANSWER_HEADERS:
            if key in response.headers:
                handler.send_header(key, response.headers[key])
        handler.end_headers()
        if method != "GET":
            return False
        for chunk in response.iter_raw(1 << 20):
            if limit is not None and len(chunk) >= limit:
                handler.wfile.write(chunk[:limit])
                handler.wfile.flush()
                handler.close_connection = True
                return True
            handler.wfile.write(chunk)
            if limit is not None:
                limit -= len(chunk)
    return False
