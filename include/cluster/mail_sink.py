"""The cluster's SMTP catcher (compose runs Mailpit): every message it receives is kept as a ``.eml`` file, and
an HTTP page lists them, with Mailpit's JSON list at ``/api/v1/messages``.

``python -m include.cluster.mail_sink --dir var/cluster/mail --smtp-port 1025 --http-port 8025``

Both listen on 127.0.0.1 only. Nothing is relayed: this is where the maintenance alerts of a test or
evaluation cluster land, to be read by a person (``http://127.0.0.1:8025/``) or a test.
"""
from __future__ import annotations

import argparse
import email
import email.policy
import html
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


class Maildir:
    """Messages as numbered ``.eml`` files (written to a temporary name, then renamed: a reader never sees
    half a message)."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def add(self, raw: bytes) -> Path:
        with self._lock:
            n = len(list(self.path.glob("*.eml"))) + 1
            target = self.path / f"{n:06d}.eml"
            tmp = self.path / f".{n:06d}.tmp"
            with open(tmp, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            return target

    def messages(self) -> list[dict]:
        out = []
        for path in sorted(self.path.glob("*.eml")):
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            body = msg.get_body(preferencelist=("plain", "html"))
            out.append({"ID": path.stem, "From": str(msg.get("From", "")), "To": str(msg.get("To", "")),
                        "Subject": str(msg.get("Subject", "")), "Date": str(msg.get("Date", "")),
                        "Snippet": (body.get_content() if body is not None else "")[:2000]})
        return out


class _Handler:
    def __init__(self, maildir: Maildir):
        self.maildir = maildir

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:      # noqa: N802 - aiosmtpd's naming
        self.maildir.add(envelope.original_content or envelope.content)
        return "250 Message accepted for delivery"


def _http_handler(maildir: Maildir) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            messages = maildir.messages()
            if self.path.startswith("/api/v1/messages"):
                body = json.dumps({"total": len(messages), "messages": messages}).encode()
                kind = "application/json"
            else:
                rows = "".join(f"<tr><td>{html.escape(m['Date'])}</td><td>{html.escape(m['To'])}</td>"
                               f"<td>{html.escape(m['Subject'])}</td></tr>" for m in reversed(messages))
                body = (f"<!doctype html><title>Alerts</title><h1>{len(messages)} message(s)</h1>"
                        f"<table><tr><th>Date</th><th>To</th><th>Subject</th></tr>{rows}</table>").encode()
                kind = "text/html; charset=utf-8"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - http.server's signature
            pass

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.cluster.mail_sink", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="where the messages are kept")
    p.add_argument("--smtp-port", type=int, default=1025)
    p.add_argument("--http-port", type=int, default=8025)
    args = p.parse_args(argv)
    from aiosmtpd.controller import Controller

    maildir = Maildir(args.dir)
    smtp = Controller(_Handler(maildir), hostname=LOOPBACK, port=args.smtp_port)
    smtp.start()
    web = ThreadingHTTPServer((LOOPBACK, args.http_port), _http_handler(maildir))
    threading.Thread(target=web.serve_forever, daemon=True).start()
    print(f"SMTP on {LOOPBACK}:{args.smtp_port}, messages at http://{LOOPBACK}:{args.http_port}/ "
          f"(kept in {args.dir})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        time.sleep(0.2)
    web.shutdown()
    smtp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
