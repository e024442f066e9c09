"""Blob bodies read straight from the connection, or through httpx where that cannot be done
(chunked, content-coded), against a small HTTP server on loopback."""

from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from hydria.image.sources.httpbody import body_chunks

BODY = os.urandom(3 << 20)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        if self.path == "/chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(BODY), 1 << 20):
                piece = BODY[start:start + (1 << 20)]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        body = gzip.compress(BODY, 1) if self.path == "/gzip" else BODY
        self.send_header("Content-Length", str(len(body) + (100 if self.path == "/short" else 0)))
        if self.path == "/gzip":
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)
        if self.path == "/short":
            self.close_connection = True  # 100 bytes short of what it announced


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("path", ["/plain", "/chunked", "/gzip"])
def test_the_body_arrives_whole(server: str, path: str) -> None:
    with httpx.Client() as client, client.stream("GET", server + path) as response:
        assert b"".join(body_chunks(response)) == BODY


def test_the_connection_is_not_reused_after_a_body_read_past_the_parser(server: str) -> None:
    with httpx.Client() as client:
        for _ in range(3):  # a reused connection would hand the next response to a confused parser
            with client.stream("GET", server + "/plain") as response:
                assert b"".join(body_chunks(response)) == BODY


def test_a_body_that_ends_early_is_a_transport_error(server: str) -> None:
    with httpx.Client() as client, client.stream("GET", server + "/short") as response, \
            pytest.raises(httpx.TransportError, match="100 bytes before the end"):
        b"".join(body_chunks(response))
