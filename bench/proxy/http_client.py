"""HTTP client decision: our ``router_client.http1`` vs aiohttp (and httpx) on the router's two hot workloads.

    .venv/bin/python -m bench.proxy.http_client [--calls 400] [--rounds 5] [--pin 1:0]

1. Predictor round trip: ``POST /predict/bulk/strict`` to a real predictor process on loopback
   (bundle: 200 trees × depth 6 per model, as ``bench.predictor.service``), one keep-alive connection,
   calls in sequence (the router coalesces concurrent decisions into one call in flight), with the
   rows of a 2-pod and a 16-pod decision. Per call: wall time (p50) and this process's CPU time.
2. Upstream streaming: a stream server process writes ``--streams`` concurrent SSE streams of 64
   events (~200 bytes, one event per write, 2 ms apart: one event per socket read, as the sim pods);
   the client reads every byte. Per event: this process's CPU time. "ours, sink" pushes bytes to a
   callback (what the relay uses), "ours, await" iterates ``chunks()``, aiohttp iterates
   ``content.iter_any()``, httpx ``aiter_raw()``; the floor counts bytes in a bare protocol (what
   reading costs on this machine without any HTTP client: event loop + syscalls).

The client runs on uvloop (as the proxy under uvicorn). Variants alternate within each round, so
load from other processes hits them alike; figures are medians over rounds. ``--pin P:R`` puts
this process on CPU ``P`` and the servers on CPU ``R``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import uvloop

from bench.common.paths import REPO
from bench.common.procstat import free_port
from bench.predictor.service import ours, publish, rows, train_files
from router_client.http1 import Http1Pool

EVENTS = 64
EVENT_GAP_S = 0.002
PATH = "/predict/bulk/strict"
HEADERS = {"content-type": "application/json"}
Call = Callable[[], Awaitable[None]]


# -- the stream server (a child process) --------------------------------------------------------------
def event(i: int) -> bytes:
    return b"data: " + orjson.dumps({"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "m",
                                      "choices": [{"index": 0, "text": f" tok{i}", "finish_reason": None}]}) + b"\n\n"


async def _stream_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), 0)
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for i in range(EVENTS):
                data = event(i)
                writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                await writer.drain()
                await asyncio.sleep(EVENT_GAP_S)
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def serve_streams(port: int) -> None:
    server = await asyncio.start_server(_stream_handler, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def start_stream_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.proxy.http_client", "--serve-streams", str(port)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            with httpx.Client() as client, client.stream("POST", f"http://127.0.0.1:{port}/x", content=b"{}") as r:
                r.read()
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("stream server did not start") from None
            time.sleep(0.1)


# -- clients ------------------------------------------------------------------------------------------
class Clients:
    """The three clients, each with one keep-alive pool, opened inside the running loop."""

    def __init__(self) -> None:
        self.ours = Http1Pool(connect_timeout_s=5)
        # tuned for the comparison: no cookie jar, no timeout timers, no decompression, C parser (default)
        self.aiohttp = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                                             auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                             timeout=aiohttp.ClientTimeout(total=None))
        self.httpx = httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=1000),
                                       timeout=30)

    async def aclose(self) -> None:
        await self.ours.aclose()
        await self.aiohttp.close()
        await self.httpx.aclose()


def predictor_calls(c: Clients, url: str, body: bytes) -> dict[str, Call]:
    head = c.ours.request_head(url, "POST", PATH, HEADERS)

    async def ours() -> None:
        status, content = await c.ours.fetch(url, head, body)
        assert status == 200 and content.startswith(b'{"predictions"')

    async def with_aiohttp() -> None:
        async with c.aiohttp.post(url + PATH, data=body, headers=HEADERS) as resp:
            content = await resp.read()
        assert resp.status == 200 and content.startswith(b'{"predictions"')

    async def with_httpx() -> None:
        resp = await c.httpx.post(url + PATH, content=body, headers=HEADERS)
        assert resp.status_code == 200 and resp.content.startswith(b'{"predictions"')

    return {"ours": ours, "aiohttp": with_aiohttp, "httpx": with_httpx}


class _Count:
    __slots__ = ("n", "done")

    def __init__(self) -> None:
        self.n = 0
        self.done = asyncio.get_running_loop().create_future()

    def body(self, data: bytes) -> None:
        self.n += len(data)

    def end(self, error: str | None) -> None:
        self.done.set_result(error)


class _RawStream(asyncio.Protocol):
    """The floor: one request written, bytes counted until the terminating chunk (no HTTP parsing)."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.n = 0
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")  # type: ignore

    def data_received(self, data: bytes) -> None:
        self.n += len(data)
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n" and not self.done.done():
            self.done.set_result(self.n)


def stream_calls(c: Clients, url: str) -> dict[str, Call]:
    expected = sum(len(event(i)) for i in range(EVENTS)) + len(b"data: [DONE]\n\n")
    host, port = url.split("//")[1].split(":")

    async def raw_floor() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        transport, _ = await loop.create_connection(lambda: _RawStream(done), host, int(port))
        assert await done > expected
        transport.close()

    async def ours_sink() -> None:
        resp = await c.ours.post(url, "/v1/completions", b"{}", HEADERS)
        sink = _Count()
        resp.stream_to(sink)
        assert await sink.done is None and sink.n == expected
        await resp.aclose()

    async def ours_await() -> None:
        resp = await c.ours.post(url, "/v1/completions", b"{}", HEADERS)
        n = 0
        async for data in resp.chunks():
            n += len(data)
        assert n == expected
        await resp.aclose()

    async def with_aiohttp() -> None:
        async with c.aiohttp.post(url + "/v1/completions", data=b"{}", headers=HEADERS) as resp:
            n = 0
            async for data in resp.content.iter_any():
                n += len(data)
        assert n == expected

    async def with_httpx() -> None:
        async with c.httpx.stream("POST", url + "/v1/completions", content=b"{}", headers=HEADERS) as resp:
            n = 0
            async for data in resp.aiter_raw():
                n += len(data)
        assert n == expected

    return {"ours, sink": ours_sink, "ours, await": ours_await, "aiohttp": with_aiohttp, "httpx": with_httpx,
            "floor: raw uvloop protocol, no HTTP parsing, new connection": raw_floor}


# -- measurement --------------------------------------------------------------------------------------
async def sequential(call: Call, n: int) -> tuple[float, float]:
    """(p50 wall ms, CPU µs per call) of ``n`` calls in sequence."""
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls) * 1e3, (time.process_time() - cpu0) / n * 1e6


async def concurrent(call: Call, streams: int, repeat: int) -> tuple[float, float]:
    """(wall s, CPU µs per event) of ``streams`` concurrent streams, ``repeat`` times each."""
    async def one() -> None:
        for _ in range(repeat):
            await call()

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(streams)))
    events = streams * repeat * (EVENTS + 1)
    return time.perf_counter() - t0, (time.process_time() - cpu0) / events * 1e6


async def measure(predictor_url: str, stream_url: str, args: argparse.Namespace) -> dict[str, Any]:
    c = Clients()
    out: dict[str, Any] = {"predictor": {}, "stream": {}}
    try:
        for n_rows in (2, 16):
            calls = predictor_calls(c, predictor_url, orjson.dumps({"requests": rows(n_rows, seed=n_rows)}))
            for call in calls.values():  # warm up: connections, code paths
                await sequential(call, 50)
            per: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
            for _ in range(args.rounds):
                for name, call in calls.items():
                    per[name].append(await sequential(call, args.calls))
            out["predictor"][n_rows] = {name: _medians(v) for name, v in per.items()}
        streams = stream_calls(c, stream_url)
        for call in streams.values():
            await concurrent(call, args.streams, 1)
        sper: dict[str, list[tuple[float, float]]] = {name: [] for name in streams}
        for _ in range(args.rounds):
            for name, call in streams.items():
                sper[name].append(await concurrent(call, args.streams, 2))
        out["stream"] = {name: _medians(v) for name, v in sper.items()}
    finally:
        await c.aclose()
    return out


def _medians(values: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)


def report(result: dict[str, Any], args: argparse.Namespace, command: str, loads: tuple[str, str]) -> str:
    lines = [f"Command: `{command}` — {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, CPython "
             f"{platform.python_version()}, aiohttp {aiohttp.__version__}, httpx {httpx.__version__}, uvloop; "
             f"`/proc/loadavg` before: {loads[0]}, after: {loads[1]}",
             "", "| workload | client | p50 ms per call | client CPU µs per call | CPU vs ours |",
             "| --- | --- | ---: | ---: | ---: |"]
    for n_rows, per in result["predictor"].items():
        base = per["ours"][1]
        for name, (p50, cpu) in per.items():
            lines.append(f"| predictor round trip, {n_rows} rows | {name} | {p50:.3f} | {cpu:.0f} | "
                         f"{cpu / base:.2f}× |")
    base = result["stream"]["ours, sink"][1]
    for name, (wall, cpu) in result["stream"].items():
        lines.append(f"| {args.streams} streams × {EVENTS} events (wall {wall:.2f} s) | {name} | – | "
                     f"{cpu:.1f} per event | {cpu / base:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.proxy.http_client", description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=400, help="predictor calls per client per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--pin", default="", help="CLIENT_CPU:SERVERS_CPU")
    p.add_argument("--serve-streams", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_streams:
        uvloop.run(serve_streams(args.serve_streams))
        return 0
    command = ".venv/bin/python -m bench.proxy.http_client " + " ".join(argv if argv is not None else sys.argv[1:])
    loads = [Path("/proc/loadavg").read_text().strip()]
    with tempfile.TemporaryDirectory() as tmp:
        bundles = Path(tmp) / "bundles"
        publish(bundles, 1, train_files())
        pred_port, stream_port = free_port(), free_port()
        with ours(bundles, pred_port) as predictor:
            streamer = start_stream_server(stream_port)
            try:
                if args.pin:
                    mine, theirs = (int(x) for x in args.pin.split(":"))
                    for pid in (predictor.pid, streamer.pid):
                        for task in Path(f"/proc/{pid}/task").iterdir():
                            os.sched_setaffinity(int(task.name), {theirs})
                    os.sched_setaffinity(0, {mine})
                result = uvloop.run(measure(f"http://127.0.0.1:{pred_port}", f"http://127.0.0.1:{stream_port}",
                                            args))
            finally:
                streamer.terminate()
                streamer.wait(10)
    loads.append(Path("/proc/loadavg").read_text().strip())
    print(report(result, args, command.strip(), (loads[0], loads[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
