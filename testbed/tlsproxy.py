"""A TLS-inspecting proxy, as sites run them, for tests: a certificate authority of its own (made
with ``openssl``), and an HTTP proxy on 127.0.0.1 that takes ``CONNECT HOST:PORT``, presents a
certificate for HOST signed by that authority, and answers every request itself with ``BODY``
(it reaches nothing beyond this machine). A program trusts it only when given the authority's
certificate, as behind a site's proxy."""

from __future__ import annotations

import socket
import socketserver
import ssl
import subprocess
import threading
from pathlib import Path
from typing import BinaryIO, Self

BODY = b"answered by the inspecting proxy\n"


class TlsInspectingProxy:
    """Started on entry, stopped on exit; ``address`` is ``127.0.0.1:PORT``, ``ca`` the authority's
    certificate (PEM, readable by everyone)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = folder / "inspecting-ca.crt"
        self._key = folder / "inspecting-ca.key"
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(self._key),
                      "-out", str(self.ca), "-subj", "/CN=hydria test inspecting proxy")
        self.ca.chmod(0o644)
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.connection)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def _context_for(self, host: str) -> ssl.SSLContext:
        """A server context whose certificate names ``host``, signed by the proxy's authority."""
        with self._lock:
            if host not in self._contexts:
                base = self.folder / f"host-{len(self._contexts)}"
                extensions = base.with_suffix(".ext")
                extensions.write_text(f"subjectAltName={'IP' if host.replace('.', '').isdigit() else 'DNS'}:{host}\n")
                self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{base}.key", "-out", f"{base}.csr",
                              "-subj", f"/CN={host}")
                self._openssl("x509", "-req", "-in", f"{base}.csr", "-CA", str(self.ca), "-CAkey", str(self._key),
                              "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", f"{base}.crt")
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(f"{base}.crt", f"{base}.key")
                self._contexts[host] = context
            return self._contexts[host]

    def _serve(self, connection: socket.socket) -> None:
        reader = connection.makefile("rb")
        request = reader.readline().split()
        _read_headers(reader)
        if len(request) == 3 and request[0] == b"CONNECT":
            connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            host = request[1].decode().rpartition(":")[0]
            try:
                with self._context_for(host).wrap_socket(connection, server_side=True) as tls:
                    inner = tls.makefile("rb")
                    inner.readline()
                    _read_headers(inner)
                    _answer(tls)
            except (ssl.SSLError, OSError):
                return  # the client refused the certificate: what an untrusting client does
        else:
            _answer(connection)


def _read_headers(reader: BinaryIO) -> None:
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return


def _answer(connection: socket.socket | ssl.SSLSocket) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                       + f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY)
