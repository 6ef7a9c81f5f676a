"""A tiny real HTTP server speaking the trainer's pull API (docs/internal-contracts.md) from a bundle root dir.

``GET /bundle/manifest`` (ETag, 304 on If-None-Match, ``wait_s`` long-poll) and
``GET /bundle/v/{version}/{file}``. It can be stopped and restarted on the same port (trainer
down / back) and told to answer the next requests with an error status (retry tests).
"""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from shared.bundle import MANIFEST, current_version, sha256, version_dir

FILE_PATH = re.compile(r"^/bundle/v/(\d+)/([A-Za-z0-9_.-]+)$")


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        return None  # a client hanging up mid long-poll (predictor shutting down) is normal


class TrainerStub:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.fail_next: list[int] = []  # statuses to answer the next requests with
        self.requests: list[str] = []
        self.manifest_sha: str | None = None  # X-Manifest-SHA256 to announce (None: the true one)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> TrainerStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802
                stub.requests.append(self.path)
                if stub.fail_next:
                    self._send(stub.fail_next.pop(0), b'{"detail":"busy"}')
                    return
                parts = urlsplit(self.path)
                if parts.path == "/bundle/manifest":
                    self._manifest(parse_qs(parts.query))
                    return
                match = FILE_PATH.match(parts.path)
                target = version_dir(stub.root, int(match.group(1))) / match.group(2) if match else None
                if target is None or not target.is_file():
                    self._send(404, b'{"detail":"no such file"}')
                    return
                self._send(200, target.read_bytes(), "application/octet-stream")

            def _manifest(self, query: dict[str, list[str]]) -> None:
                seen = self.headers.get("If-None-Match")
                deadline = time.monotonic() + min(float(query.get("wait_s", ["0"])[0]), 30.0)
                while True:
                    version = current_version(stub.root)
                    if version is None:
                        self._send(503, b'{"detail":"no bundle yet"}')
                        return
                    tag = f'"v{version}"'
                    if tag != seen:
                        body = (version_dir(stub.root, version) / MANIFEST).read_bytes()
                        self._send(200, body, headers={"ETag": tag, "X-Bundle-Version": str(version),
                                                       "X-Manifest-SHA256": stub.manifest_sha or sha256(body)})
                        return
                    if time.monotonic() >= deadline or stub._stopping.is_set():
                        self._send(304, b"", headers={"ETag": tag})
                        return
                    time.sleep(0.02)

            def _send(self, status: int, body: bytes, ctype: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Connection", "close")  # no keep-alive: "down" really means down
                self.close_connection = True
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if status != 304:
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status != 304:
                    self.wfile.write(body)

        self._stopping.clear()
        server = _QuietServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        self._server = None
