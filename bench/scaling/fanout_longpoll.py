"""Part 2 of ``bench.scaling.fanout``: the trainer holding N idle long-polls from simulated predictors, and the
fan-out of a new bundle to all of them (see that module's docstring)."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.common.procstat import free_port, loadavg, rss_mb
from bench.scaling.fanout_common import CAP_ROWS, WAIT_S, largest_bundle_run, process, stats
from shared.bundle import manifest_files
from shared.trainer_settings import TrainerSettings
from trainer.service import TrainerService


def serve(data_dir: str, port: int) -> None:
    """The trainer app exactly as ``python -m trainer`` builds it (retrain loop off) + two bench-only routes:
    ``POST /_bench/publish`` (carry the live models into a new version: write, fsync, load, swap, wake the
    long-polls, as a cycle that publishes does) and ``GET /_bench/cpu`` (this process's CPU seconds)."""
    import uvicorn
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    from trainer.app import create_app

    settings = TrainerSettings.from_env(host="127.0.0.1", port=port, data_dir=data_dir)
    logging.basicConfig(level="WARNING")
    app = create_app(settings, run_loop=False)
    service: TrainerService = app.state.service

    def republish() -> dict[str, float]:
        t0, c0 = time.monotonic(), time.thread_time()
        version = service.retrainer._publish({})  # no challenger: both live models carried into vN+1
        return {"version": version, "t_start": t0, "t_live": time.monotonic(), "publish_cpu_s": time.thread_time() - c0}

    async def bench_publish() -> JSONResponse:
        return JSONResponse(await run_in_threadpool(republish))

    async def bench_cpu() -> JSONResponse:
        return JSONResponse({"cpu_s": time.process_time(), "threads": threading.active_count()})

    app.add_api_route("/_bench/publish", bench_publish, methods=["POST"])
    app.add_api_route("/_bench/cpu", bench_cpu, methods=["GET"])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    server.run()


class Conn:
    """A minimal HTTP/1.1 keep-alive client connection (Content-Length, chunked, 304 without body)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(self, method: str, target: str, headers: Sequence[str] = ()) -> tuple[int, dict[str, str], bytes]:
        extra = ["Content-Length: 0"] if method == "POST" else []
        head = "\r\n".join([f"{method} {target} HTTP/1.1", f"Host: {self.host}", "Accept: */*", *headers, *extra,
                            "", ""])
        self.writer.write(head.encode("latin-1"))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        h = {}
        for line in lines:
            if ":" in line:
                k, v = line.split(":", 1)
                h[k.strip().lower()] = v.strip()
        if status in (204, 304) or status < 200:
            return status, h, b""
        if "content-length" in h:
            return status, h, await self.reader.readexactly(int(h["content-length"]))
        if h.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    return status, h, b"".join(parts)
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
        return status, h, await self.reader.read()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Poller:
    """One simulated predictor: the long-poll loop of ``predictor/sync.py`` against the pull API."""

    host: str
    port: int
    holding: bool = False
    renewals: int = 0
    downloads: dict[int, tuple[float, float, int]] = field(default_factory=dict)  # version → (t_manifest, t_done, B)
    error: str | None = None

    async def run(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            conn = await Conn.open(self.host, self.port)
        except OSError as exc:
            self.error = repr(exc)
            return
        try:
            status, h, _ = await conn.request("GET", "/bundle/manifest")
            assert status == 200, status
            etag = h["etag"]
            while True:
                self.holding = True
                status, h, body = await conn.request("GET", f"/bundle/manifest?wait_s={WAIT_S:g}",
                                                     [f"If-None-Match: {etag}"])
                self.holding = False
                if status == 304:
                    self.renewals += 1
                    continue
                assert status == 200, status
                t_manifest, version, size = time.monotonic(), int(h["x-bundle-version"]), len(body)
                for name in manifest_files(body):
                    fstatus, _, data = await conn.request("GET", f"/bundle/v/{version}/{name}")
                    assert fstatus == 200, (name, fstatus)
                    size += len(data)
                self.downloads[version] = (t_manifest, time.monotonic(), size)
                etag = h["etag"]
        except (OSError, asyncio.IncompleteReadError, AssertionError) as exc:
            self.error = repr(exc)
        finally:
            conn.close()


async def _control(port: int, method: str, path: str) -> dict[str, Any]:
    """A bench control call on a fresh connection (an idle one is closed by uvicorn after 5 s)."""
    conn = await Conn.open("127.0.0.1", port)
    try:
        status, _, body = await conn.request(method, path)
    finally:
        conn.close()
    assert status == 200, (path, status, body[:200])
    result: dict[str, Any] = orjson.loads(body)
    return result


async def _longpoll_round(port: int, pid: int, n: int, idle_s: float, publishes: int) -> dict[str, Any]:
    host = "127.0.0.1"
    pollers = [Poller(host, port) for _ in range(n)]
    tasks = [asyncio.create_task(p.run(1.0 * i / max(1, n))) for i, p in enumerate(pollers)]
    deadline = time.monotonic() + 30
    while not all(p.holding or p.error for p in pollers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # every held request registered on the trainer
    errors = [p.error for p in pollers if p.error]
    held = sum(p.holding for p in pollers)
    row: dict[str, Any] = {"n": n, "held": held, "connect_errors": errors[:3], "load_start": loadavg()}

    renew0 = sum(p.renewals for p in pollers)
    cpu0, client0, t0 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time(), time.monotonic()
    await asyncio.sleep(idle_s)
    cpu1, client1, t1 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time(), time.monotonic()
    rss, hwm = rss_mb(pid)
    row.update(idle_s=t1 - t0, idle_cpu_s=cpu1 - cpu0, idle_cpu_s_per_min=(cpu1 - cpu0) / (t1 - t0) * 60,
               idle_client_cpu_s=client1 - client0, renewals=sum(p.renewals for p in pollers) - renew0,
               rss_idle_mb=rss, hwm_idle_mb=hwm)

    fanouts = []
    for _ in range(publishes):
        while not all(p.holding or p.error for p in pollers):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        cpu0, client0 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time()
        pub = await _control(port, "POST", "/_bench/publish")
        version = int(pub["version"])
        deadline = time.monotonic() + 120
        while not all(version in p.downloads or p.error for p in pollers) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        t_all = time.monotonic()
        cpu1, client1 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time()
        got = [p.downloads[version] for p in pollers if version in p.downloads]
        done = [d[1] - pub["t_live"] for d in got]
        fanouts.append({
            "version": version, "clients_done": len(got), "publish_wall_s": pub["t_live"] - pub["t_start"],
            "publish_cpu_s": pub["publish_cpu_s"], "trainer_cpu_s": cpu1 - cpu0,
            "serving_cpu_s": cpu1 - cpu0 - pub["publish_cpu_s"], "client_cpu_s": client1 - client0,
            "first_manifest_s": stats([d[0] - pub["t_live"] for d in got]), "done_s": stats(done),
            "all_done_s": (t_all - pub["t_live"]) if n else 0.0, "bytes_per_client": got[0][2] if got else 0,
            "bytes_total": sum(d[2] for d in got)})
    rss, hwm = rss_mb(pid)
    row.update(fanouts=fanouts, rss_after_mb=rss, hwm_after_mb=hwm, load_end=loadavg(),
               errors=[p.error for p in pollers if p.error][:3])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(2.0)  # the trainer sees the disconnects (checked every second)
    return row


def bench_longpoll(ns: Sequence[int], idle_s: float, publishes: int) -> dict[str, Any]:
    run = largest_bundle_run()
    port = free_port()
    env = {"LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": str(CAP_ROWS)}
    cmd = [sys.executable, "-m", "bench.scaling.fanout", "serve", "--data-dir", run["data_dir"], "--port", str(port)]
    rows = []
    with process(cmd, f"http://127.0.0.1:{port}/readyz", env) as proc:
        time.sleep(2.0)
        rss0 = rss_mb(proc.pid)
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            for n in ns:
                row = runner.run(_longpoll_round(port, proc.pid, n, idle_s, publishes))
                rows.append(row)
                f = row["fanouts"]
                print(f"long-poll N={n}: held {row['held']}, idle {row['idle_cpu_s_per_min']:.2f} CPU-s/min, "
                      f"RSS {row['rss_idle_mb']:.0f} MB; fan-out max " +
                      ", ".join(f"{x['done_s']['max']:.3f} s / {x['serving_cpu_s']:.3f} CPU-s" for x in f), flush=True)
    return {"rows_per_model": run["rows_per_model"], "wait_s": WAIT_S, "rss_start_mb": rss0, "rounds": rows}
