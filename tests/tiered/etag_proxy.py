"""An HTTP proxy in front of a real ``weed`` S3 gateway that can change the ETag of the store's answers to uploads,
as a store (or a path to it) that kept other bytes than those sent would answer: the upload's check of every
answer against the MD5 of the bytes it sent must catch it; or acknowledge whole-object PUTs it never stores, as a
store that lost acknowledged writes: the copy's read-back of what the store kept must catch that. Requests and their bodies pass unchanged (the SigV4
signature covers the Host header, which is forwarded as the client sent it)."""
from __future__ import annotations

import hashlib
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def _flipped(etag: str) -> str:
    """The ETag with its first hex digit changed (quotes and a ``-<parts>`` suffix kept)."""
    i = next(i for i, c in enumerate(etag) if c in "0123456789abcdef")
    return etag[:i] + ("0" if etag[i] != "0" else "1") + etag[i + 1:]


class EtagProxy:
    """``EtagProxy(weed.endpoint_url)``: listens on 127.0.0.1; while :attr:`damage_uploads` is set, every answer to
    a PUT (PutObject, UploadPart) carries another ETag than the store computed. :attr:`damaged` counts them. While
    :attr:`lose_puts` is set, a whole-object PUT is answered as a store that acknowledged it and then lost it would
    (200 and the MD5 of the body sent) and never reaches the store; :attr:`lost` counts them."""

    def __init__(self, upstream_url: str) -> None:
        target = urlsplit(upstream_url)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.damage_uploads = False
        self.damaged = 0
        self.lose_puts = False      # answer a whole-object PUT as stored (its right ETag) without passing it on
        self.lost = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:    # noqa: A002 - the base class's name
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.command == "PUT" and proxy.lose_puts and "uploadId=" not in self.path:
                    proxy.lost += 1
                    self.send_response(200, "OK")
                    self.send_header("ETag", '"' + hashlib.md5(body or b"").hexdigest() + '"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP and name.lower() != "expect":
                            conn.putheader(name, value)
                    conn.endheaders(body)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for name, value in answer.getheaders():
                        low = name.lower()
                        if low in _HOP_BY_HOP or (low == "content-length" and self.command != "HEAD"):
                            continue        # a HEAD's length is the object's; other bodies are re-sent whole
                        if low == "etag" and self.command == "PUT" and proxy.damage_uploads:
                            value = _flipped(value)
                            proxy.damaged += 1
                        self.send_header(name, value)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="etag-proxy", daemon=True)

    def __enter__(self) -> EtagProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
