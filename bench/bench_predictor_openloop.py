"""Open-loop latency of the prediction server at a fixed offered rate (no coordinated omission).

    .venv/bin/python -m bench.bench_predictor_openloop [--duration 10] [--warmup 1] [--arrivals uniform|poisson]

Closed-loop tools (``wrk``) send the next request only when one returns, so at concurrency 8 they
saturate the server and report queueing (Little's law), not latency at a given load. Here requests
are *scheduled* at a fixed rate (uniform spacing, or Poisson with ``--arrivals poisson``) and spread
over 8 keep-alive connections: at each scheduled instant the request goes out on an idle connection,
or waits in a FIFO for the next one to free up. Latency = response fully read − *scheduled* send time,
so any wait for a connection (or a late sender) counts against the server, as in wrk2.

Generator (separate process from the server; stdlib only): one sender thread sleeping to each
scheduled instant (``clock_nanosleep``, timer slack set to 1 µs) and writing to blocking sockets,
one receiver thread on ``epoll`` parsing responses by ``Content-Length``. It reports its own health:
achieved vs offered rate, sender wake-up lag, and its CPU use (and the server's), per offered rate.
The server is ``python -m predictor`` (uvicorn + uvloop + httptools, one process) serving the same
200-tree depth-6 TTFT + TPOT bundle as ``bench.bench_predictor`` (its helpers build it).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import math
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from bench.bench_predictor import DEPTH, TREES, free_port, ours, publish, rows, train_files, wrk

CONNECTIONS = 8
PR_SET_TIMERSLACK = 29
# (label, method, path, body kind, rows per call, offered calls/s)
SCENARIOS = (
    ("single (unloaded reference)", "POST", "/predict", "single", 1, 100),
    ("single", "POST", "/predict", "single", 1, 1000),
    ("single", "POST", "/predict", "single", 1, 2000),
    ("single", "POST", "/predict", "single", 1, 3000),
    ("bulk/strict 100 rows", "POST", "/predict/bulk/strict", "bulk", 100, 500),
    ("bulk/strict 100 rows", "POST", "/predict/bulk/strict", "bulk", 100, 1000),
    ("GET /healthz (HTTP floor)", "GET", "/healthz", "none", 0, 1000),
    ("GET /healthz (HTTP floor)", "GET", "/healthz", "none", 0, 3000),
)


def request_bytes(method: str, path: str, port: int, body: bytes) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


@dataclass
class Conn:
    sock: socket.socket
    buf: bytearray = field(default_factory=bytearray)
    index: int = -1  # request in flight on this connection


class Run:
    """One open-loop phase: ``n`` requests at ``offsets`` (s after t0) over ``CONNECTIONS`` connections."""

    def __init__(self, port: int, payload: bytes, offsets: np.ndarray) -> None:
        self.payload, self.offsets, self.n = payload, offsets, len(offsets)
        self.conns = [Conn(socket.create_connection(("127.0.0.1", port), timeout=10)) for _ in range(CONNECTIONS)]
        for c in self.conns:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sock.settimeout(None)
        self.by_fd = {c.sock.fileno(): c for c in self.conns}
        self.idle: collections.deque[Conn] = collections.deque(self.conns)
        self.pending: collections.deque[int] = collections.deque()
        self.lock = threading.Lock()
        self.sent = np.full(self.n, np.nan)
        self.done = np.full(self.n, np.nan)
        self.wake_lag = np.full(self.n, np.nan)
        self.status_bad = 0
        self.completed = 0
        self.t0 = 0.0

    def _send(self, conn: Conn, i: int) -> None:
        conn.index = i
        self.sent[i] = time.perf_counter()
        conn.sock.sendall(self.payload)

    def sender(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # 1 µs timer slack for this thread's sleeps
        t0, offsets = self.t0, self.offsets
        for i in range(self.n):
            delay = t0 + offsets[i] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.wake_lag[i] = time.perf_counter() - (t0 + offsets[i])
            with self.lock:
                conn = self.idle.popleft() if self.idle else None
                if conn is None:
                    self.pending.append(i)
            if conn is not None:
                self._send(conn, i)

    def _response(self, conn: Conn) -> bool:
        """Consume one complete response from ``conn.buf``; False while it is still partial."""
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(conn.buf[:end]).lower()
        match = re.search(rb"\r\ncontent-length:\s*(\d+)", head)
        total = end + 4 + (int(match[1]) if match else 0)
        if len(conn.buf) < total:
            return False
        self.done[conn.index] = time.perf_counter()
        if not head.startswith(b"http/1.1 200"):
            self.status_bad += 1
        del conn.buf[:total]
        self.completed += 1
        return True

    def receiver(self, deadline: float) -> None:
        poller = select.epoll()
        for fd in self.by_fd:
            poller.register(fd, select.EPOLLIN)
        try:
            while self.completed < self.n and time.perf_counter() < deadline:
                for fd, _ in poller.poll(0.1):
                    conn = self.by_fd[fd]
                    chunk = conn.sock.recv(262144)
                    if not chunk:
                        raise RuntimeError("server closed a connection")
                    conn.buf += chunk
                    if self._response(conn):
                        with self.lock:
                            nxt = self.pending.popleft() if self.pending else None
                            if nxt is None:
                                self.idle.append(conn)
                        if nxt is not None:
                            self._send(conn, nxt)
        finally:
            poller.close()

    def go(self, drain_s: float) -> float:
        """Run the phase; returns wall seconds from t0 to the last completion (or the drain deadline)."""
        self.t0 = time.perf_counter() + 0.05
        deadline = self.t0 + float(self.offsets[-1]) + drain_s
        rx = threading.Thread(target=self.receiver, args=(deadline,), daemon=True)
        tx = threading.Thread(target=self.sender, daemon=True)
        rx.start()
        tx.start()
        tx.join()
        rx.join()
        for c in self.conns:
            c.sock.close()
        last = np.nanmax(self.done) if self.completed else time.perf_counter()
        return float(last - self.t0)


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schedule(rate: float, duration: float, arrivals: str, seed: int) -> np.ndarray:
    n = int(round(rate * duration))
    if arrivals == "uniform":
        return np.arange(n) / rate
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    return np.cumsum(gaps) - gaps[0]


def measure(port: int, pid: int, payload: bytes, rate: float, args: argparse.Namespace) -> dict[str, float]:
    offsets = schedule(rate, args.warmup + args.duration, args.arrivals, seed=int(rate))
    run = Run(port, payload, offsets)
    cpu0, srv0, wall0 = time.process_time(), proc_cpu_s(pid), time.perf_counter()
    span = run.go(args.drain)
    cpu1, srv1, wall1 = time.process_time(), proc_cpu_s(pid), time.perf_counter()
    keep = offsets >= args.warmup
    lat = (run.done - (run.t0 + offsets))[keep] * 1e3
    lost = int(np.isnan(lat).sum())
    lat = lat[~np.isnan(lat)]
    sent = run.sent[~np.isnan(run.sent)]
    wall = wall1 - wall0
    return {
        "offered": rate, "sent_rate": len(sent) / max(float(sent[-1] - run.t0), 1e-9) if len(sent) > 1 else 0.0,
        "done_rate": run.completed / span, "n": float(keep.sum()), "lost": float(lost),
        "p50": float(np.percentile(lat, 50)), "p90": float(np.percentile(lat, 90)),
        "p99": float(np.percentile(lat, 99)), "p999": float(np.percentile(lat, 99.9)), "max": float(lat.max()),
        "bad": float(run.status_bad), "gen_cpu": (cpu1 - cpu0) / wall * 100, "srv_cpu": (srv1 - srv0) / wall * 100,
        "wake_p99_us": float(np.percentile(run.wake_lag[keep], 99)) * 1e6,
        "conn_wait_p99_us": float(np.percentile((run.sent - run.t0 - offsets)[keep], 99)) * 1e6,
    }


def warm(port: int, payloads: dict[str, bytes]) -> None:
    for payload in payloads.values():
        run = Run(port, payload, np.arange(400) / 400.0)
        run.go(5.0)
        assert run.status_bad == 0 and run.completed == 400, "warm-up failed"


def table(results: list[tuple[str, int, dict[str, float]]]) -> str:
    out = ["| endpoint | offered calls/s | rows/s | achieved calls/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms "
           "| non-200 / lost | server CPU % | generator CPU % | sender wake lag p99 µs | send-after-schedule p99 µs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, per_call, r in results:
        rows_s = f"{r['offered'] * per_call:,.0f}" if per_call else "–"
        out.append(f"| {label} | {r['offered']:,.0f} | {rows_s} | {r['done_rate']:,.0f} | {r['p50']:.3f} | "
                   f"{r['p90']:.3f} | {r['p99']:.3f} | {r['p999']:.3f} | {r['max']:.2f} | "
                   f"{r['bad']:.0f} / {r['lost']:.0f} | {r['srv_cpu']:.0f} | {r['gen_cpu']:.0f} | "
                   f"{r['wake_p99_us']:.0f} | {r['conn_wait_p99_us']:.0f} |")
    return "\n".join(out)


def wrk_reference(port: int, body: bytes, work: Path) -> str:
    if subprocess.run(["which", "wrk"], capture_output=True).returncode != 0:
        return "wrk not installed: no closed-loop reference"
    c1 = wrk(f"http://127.0.0.1:{port}/predict", body, 1, 3, work)
    c8 = wrk(f"http://127.0.0.1:{port}/predict", body, 8, 3, work)
    return (f"closed-loop reference, same server, same run (wrk -t1, 3 s): single c1 p50 {c1['p50']:.3f} ms "
            f"({c1['rps']:,.0f} req/s); c8 p50 {c8['p50']:.3f} ms at {c8['rps']:,.0f} req/s (saturated)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per offered rate")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds offered first and not measured")
    parser.add_argument("--drain", type=float, default=10.0, help="max seconds to wait for late responses")
    parser.add_argument("--arrivals", choices=("uniform", "poisson"), default="uniform")
    args = parser.parse_args()
    sys.setswitchinterval(0.0005)
    work = Path(tempfile.mkdtemp(prefix="bench-openloop-"))
    root = work / "bundles"
    publish(root, 1, train_files())
    bodies = {"single": orjson.dumps(rows(1, 2)[0]), "bulk": orjson.dumps({"requests": rows(100, 1)}), "none": b""}
    load_start = os.getloadavg()
    print(f"# bench_predictor_openloop — {TREES} trees depth {DEPTH}, {CONNECTIONS} keep-alive connections, "
          f"{args.arrivals} arrivals, {args.duration:g} s measured (+{args.warmup:g} s warm-up) per rate, "
          f"machine: {os.cpu_count()} cores, load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / "
          f"{load_start[2]:.2f}\n", flush=True)
    port = free_port()
    results: list[tuple[str, int, dict[str, float]]] = []
    with ours(root, port) as proc:
        payloads = {k: request_bytes("POST", p, port, bodies[k]) for k, p in
                    (("single", "/predict"), ("bulk", "/predict/bulk/strict"))}
        warm(port, payloads)
        for label, method, path, kind, per_call, rate in SCENARIOS:
            payload = request_bytes(method, path, port, bodies[kind])
            results.append((label, per_call, measure(port, proc.pid, payload, rate, args)))
            print(f"  done: {label} @ {rate}/s p50 {results[-1][2]['p50']:.3f} ms", file=sys.stderr, flush=True)
        reference = wrk_reference(port, bodies["single"], work)
    print(table(results))
    print(f"\n{reference}")
    end = os.getloadavg()
    print(f"\nload average at end {end[0]:.2f} / {end[1]:.2f} / {end[2]:.2f}")
    if any(math.isnan(r["p50"]) for _, _, r in results):
        sys.exit("no completions in some phase")


if __name__ == "__main__":
    main()
