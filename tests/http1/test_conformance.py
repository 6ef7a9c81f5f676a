"""The hand-written HTTP/1.1 client (``router_client.http1``) against real servers on 127.0.0.1.

Real servers: uvicorn with both of its HTTP implementations (h11 and httptools), plain and TLS
(a self-signed certificate made in the test with ``cryptography``). Odd cases no framework server
sends on demand (chunk extensions, trailers, 103 Early Hints, bodies delimited by the close,
cuts in the middle of a body) come from a raw asyncio socket server writing exact bytes.
Every case is read both ways: awaited (``read``) and pushed to a ``BodySink`` (``stream_to``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.types import Receive, Scope, Send

from demo.procs import LOOPBACK, free_port
from router_client.http1 import ConnectFailed, Http1Pool, Http1Response, StreamBroken
from router_client.proxy.forwarding import ForwardSettings, make_pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


class Collect:
    """A ``BodySink`` that records what it is given."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ended = asyncio.get_running_loop().create_future()

    def body(self, data: bytes) -> None:
        assert not self.ended.done(), "body after end"
        self.parts.append(data)

    def end(self, error: str | None) -> None:
        assert not self.ended.done(), "end called twice"
        self.ended.set_result(error)


async def body_of(response: Http1Response, mode: str) -> bytes:
    """The whole body, awaited (``read``) or pushed to a sink (``stream_to``); StreamBroken if cut."""
    if mode == "read":
        return await response.read()
    sink = Collect()
    response.stream_to(sink)
    error = await sink.ended
    if error is not None:
        raise StreamBroken(error)
    return b"".join(sink.parts)


READ_MODES = pytest.mark.parametrize("mode", ["read", "sink"])


# -- real servers: uvicorn (h11 and httptools), plain and TLS ----------------------------------------
async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/port``: the client's port (same port = same connection); ``/close``: answers with
    ``connection: close``; ``/stream``: a chunked body in 3 parts; ``/echo``: the request body."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    port = str(scope["client"][1]).encode()
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    headers = [(b"connection", b"close")] if path == "/close" else []
    content = body if path == "/echo" else port
    await send({"type": "http.response.start", "status": 200,
                "headers": [*headers, (b"content-length", str(len(content)).encode())]})
    await send({"type": "http.response.body", "body": content})


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.contextmanager
def serve_uvicorn(http: str, **tls: Any) -> Iterator[str]:
    port = free_port()
    server = _Quiet(uvicorn.Config(asgi_app, host=LOOPBACK, port=port, http=http, lifespan="off",
                                   log_level="warning", access_log=False, **tls))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"{'https' if tls else 'http'}://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost: (cert.pem, key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "latency-router test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK)),
                                                    x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def get(pool: Http1Pool, url: str, path: str, body: bytes = b"", mode: str = "read",
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    response = await pool.send(url, pool.request_head(url, "POST", path, headers or {}), body)
    try:
        return response.status_code, await body_of(response, mode)
    finally:
        await response.aclose()


@pytest.mark.parametrize("http", ["h11", "httptools"])
@READ_MODES
def test_uvicorn_keep_alive_close_chunked_and_100_continue(http: str, mode: str) -> None:
    with serve_uvicorn(http) as url:
        async def main() -> None:
            pool = Http1Pool(connect_timeout_s=5)
            ports = {(await get(pool, url, "/port", mode=mode))[1] for _ in range(3)}
            assert len(ports) == 1  # one keep-alive connection, reused
            closing = {(await get(pool, url, "/close", mode=mode))[1] for _ in range(3)}
            assert len(closing) == 3  # "connection: close" answers are never reused
            assert await get(pool, url, "/stream", mode=mode) == (200, b"one,two,three")
            big = bytes(range(256)) * 4096  # 1 MiB, several reads
            assert await get(pool, url, "/echo", big, mode=mode) == (200, big)
            expect = {"expect": "100-continue"}  # the server answers "100 Continue" first, then 200
            assert await get(pool, url, "/echo", b"after-100", mode=mode, headers=expect) == (200, b"after-100")
            await pool.aclose()

        run(main())


@READ_MODES
def test_tls_with_a_trusted_self_signed_certificate(cert: tuple[Path, Path], mode: str) -> None:
    context = ssl.create_default_context(cafile=str(cert[0]))
    with serve_uvicorn("httptools", ssl_certfile=str(cert[0]), ssl_keyfile=str(cert[1])) as url:
        async def main() -> None:
            pool = Http1Pool(connect_timeout_s=5, ssl_context=context)
            ports = {(await get(pool, url, "/port", mode=mode))[1] for _ in range(3)}
            assert len(ports) == 1
            assert await get(pool, url, "/stream", mode=mode) == (200, b"one,two,three")
            big = b"x" * (1 << 20)
            assert await get(pool, url, "/echo", big, mode=mode) == (200, big)
            await pool.aclose()
            with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                await Http1Pool(connect_timeout_s=5).post(url, "/port", b"", {})  # system trust store only

        run(main())


def test_scheme_mismatch_fails_cleanly(cert: tuple[Path, Path]) -> None:
    with serve_uvicorn("httptools", ssl_certfile=str(cert[0]), ssl_keyfile=str(cert[1])) as tls_url, \
            serve_uvicorn("httptools") as plain_url:
        async def main() -> None:
            with pytest.raises(StreamBroken):  # plain HTTP to a TLS server: no HTTP answer
                await Http1Pool(connect_timeout_s=5).post(tls_url.replace("https://", "http://"), "/port", b"", {})
            with pytest.raises(ConnectFailed):  # TLS to a plain server: the handshake fails
                await Http1Pool(connect_timeout_s=5).post(plain_url.replace("http://", "https://"), "/port", b"", {})

        run(main())


# -- a raw socket server writing exact bytes ---------------------------------------------------------
async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


def raw_server(answers: list[list[bytes]], *, then: str = "keep") -> Callable[[], Awaitable[Any]]:
    """Per connection: for each request, write the pieces of the next answer (separate writes), then
    ``keep`` the connection open for the next request, ``close`` it, or ``abort`` (RST)."""
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while answers:
                await _request(reader)
                for piece in answers.pop(0):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if then == "close":
                    writer.close()
                    return
                if then == "abort":
                    reset(writer)
                    return
            await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def start() -> tuple[asyncio.Server, str, list[int]]:
        server = await asyncio.start_server(handler, LOOPBACK, 0)
        return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}", connections

    return start


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN: the peer sees ECONNRESET."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def chunk(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x%b\r\n%b\r\n" % (len(data), ext, data)


OK_CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/plain\r\n\r\n"


@READ_MODES
def test_chunk_extensions_and_trailers_keep_the_connection_usable(mode: str) -> None:
    answer = [OK_CHUNKED + chunk(b"hello ", b";name=value") + chunk(b"world", b';q="quoted;x"'),
              b"0\r\nx-checksum: abc\r\nx-other: 1\r\n\r\n"]
    start = raw_server([answer, [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain"]])

    async def main() -> None:
        server, url, connections = await start()
        pool = Http1Pool()
        response = await pool.post(url, "/", b"{}", {})
        assert await body_of(response, mode) == b"hello world"
        assert response.header(b"x-checksum") is None  # trailers are not response headers
        await response.aclose()
        assert await get(pool, url, "/", mode=mode) == (200, b"again")
        assert len(connections) == 1
        await pool.aclose()
        server.close()

    run(main())


@READ_MODES
def test_interim_1xx_responses_are_skipped(mode: str) -> None:
    interim = (b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
               b"HTTP/1.1 100 Continue\r\n\r\n")
    final = b"HTTP/1.1 201 Created\r\ncontent-length: 4\r\nx-final: yes\r\n\r\ndone"
    start = raw_server([[interim + final], [interim, final], [b"HTTP/1.1 100 Continue\r\n\r\n", OK_CHUNKED,
                                                          chunk(b"s"), b"0\r\n\r\n"]])

    async def main() -> None:
        server, url, _ = await start()
        pool = Http1Pool()
        for _ in range(2):  # one write, then interim and final in separate writes
            response = await pool.post(url, "/", b"{}", {})
            assert response.status_code == 201 and response.header(b"x-final") == b"yes"
            assert response.header(b"link") is None
            assert await body_of(response, mode) == b"done"
            await response.aclose()
        assert await get(pool, url, "/", mode=mode) == (200, b"s")
        await pool.aclose()
        server.close()

    run(main())


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 200 OK\r\nconnection: close", b"HTTP/1.0 200 OK"])
@READ_MODES
def test_body_delimited_by_the_close_is_complete(status_line: bytes, mode: str) -> None:
    start = raw_server([[status_line + b"\r\ncontent-type: text/plain\r\n\r\n", b"part one, ", b"part two"]],
                       then="close")

    async def main() -> None:
        server, url, _ = await start()
        assert await get(Http1Pool(), url, "/", mode=mode) == (200, b"part one, part two")
        server.close()

    run(main())


CUTS = {
    "content-length": [b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n", b"only forty bytes of the hundred promised"],
    "chunked": [OK_CHUNKED, chunk(b"data: {}\n\n"), b"a\r\nhal"],
    "close-delimited": [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", b"partial"],
}


CUT_CASES = [(framing, then) for framing in CUTS for then in ("close", "abort")
             if (framing, then) != ("close-delimited", "close")]  # a clean close ends such a body (above)


@pytest.mark.parametrize(("framing", "then"), CUT_CASES)
@READ_MODES
def test_mid_body_disconnect_is_stream_broken(framing: str, then: str, mode: str) -> None:
    start = raw_server([CUTS[framing]], then=then)

    async def main() -> None:
        server, url, _ = await start()
        response = await Http1Pool().post(url, "/", b"{}", {})
        with pytest.raises(StreamBroken):
            await body_of(response, mode)
        await response.aclose()
        server.close()

    run(main())


@READ_MODES
def test_no_body_statuses_and_reuse(mode: str) -> None:
    start = raw_server([[b"HTTP/1.1 204 No Content\r\n\r\n"], [b"HTTP/1.1 304 Not Modified\r\netag: x\r\n\r\n"],
                        [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]])

    async def main() -> None:
        server, url, connections = await start()
        pool = Http1Pool()
        assert await get(pool, url, "/", mode=mode) == (204, b"")
        assert await get(pool, url, "/", mode=mode) == (304, b"")
        assert await get(pool, url, "/", mode=mode) == (200, b"ok")
        assert len(connections) == 1
        await pool.aclose()
        server.close()

    run(main())


def test_sink_gets_bytes_received_before_it_was_attached_and_can_pause() -> None:
    pieces = [OK_CHUNKED + chunk(b"early ")] + [chunk(b"x" * 1000) for _ in range(50)] + [b"0\r\n\r\n"]
    start = raw_server([pieces])

    async def main() -> None:
        server, url, _ = await start()
        pool = Http1Pool()
        response = await pool.post(url, "/", b"{}", {})
        await asyncio.sleep(0.05)  # some of the body is queued before the sink attaches
        response.pause_reading()
        assert not response.reading
        response.resume_reading()
        assert await body_of(response, "sink") == b"early " + b"x" * 50_000
        await response.aclose()
        await pool.aclose()
        server.close()

    run(main())


def test_a_connection_paused_when_its_response_completed_reads_again_when_reused() -> None:
    start = raw_server([[OK_CHUNKED + chunk(b"one") + chunk(b"two") + b"0\r\n\r\n"],
                        [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain"]])

    async def main() -> None:
        server, url, connections = await start()
        pool = Http1Pool()
        response = await pool.post(url, "/", b"{}", {})

        class PauseAtOnce(Collect):
            def body(self, data: bytes) -> None:
                super().body(data)
                response.pause_reading()  # back-pressure while the rest of the message is in this read

        sink = PauseAtOnce()
        response.stream_to(sink)
        assert await sink.ended is None and b"".join(sink.parts) == b"onetwo"
        await response.aclose()  # complete: back to the pool, still paused
        assert await get(pool, url, "/") == (200, b"again")
        assert len(connections) == 1
        await pool.aclose()
        server.close()

    run(main())


def test_bad_urls_are_connect_failed() -> None:
    pool = Http1Pool()
    for url in ("ftp://h:1", "http://", "http://h:notaport", "unix:///tmp/x"):
        with pytest.raises(ConnectFailed):
            pool.origin(url)
    assert pool.origin("https://example.test")[0] == ("example.test", 443, True)
    assert pool.origin("http://[::1]:8000/base/")[1] == "/base"
    assert b"host: [::1]:8000\r\n" in pool.request_head("http://[::1]:8000", "GET", "/x", {})


def test_proxy_pod_pool_trusts_the_configured_ca_file(cert: tuple[Path, Path]) -> None:
    with serve_uvicorn("httptools", ssl_certfile=str(cert[0]), ssl_keyfile=str(cert[1])) as url:
        async def main() -> None:
            pool = make_pool(ForwardSettings(connect_timeout_s=5, pod_ca_file=str(cert[0])))  # --pod-ca-file
            assert await get(pool, url, "/stream") == (200, b"one,two,three")
            await pool.aclose()

        run(main())
