"""Open-loop latency of the prediction server at a fixed offered rate (no coordinated omission).

    .venv/bin/python -m bench.predictor.openloop [--duration 10] [--warmup 1] [--arrivals uniform|poisson]

Closed-loop tools (``wrk``) send the next request only when one returns, so at concurrency 8 they
saturate the server and report queueing (Little's law), not latency at a given load. Here requests
are *scheduled* at a fixed rate (uniform spacing, or Poisson with ``--arrivals poisson``) and spread
over 8 keep-alive connections: at each scheduled instant the request goes out on an idle connection,
or waits in a FIFO for the next one to free up. Latency = response fully read − *scheduled* send time,
so any wait for a connection (or a late sender) counts against the server, as in wrk2.

Generator (separate process from the server; stdlib + ctypes only): a single thread on one ``epoll``
over the 8 sockets and a ``timerfd`` armed at the next scheduled instant (ns resolution), writing
requests with ``sendall`` and parsing responses by ``Content-Length``. It reports its own health:
achieved vs offered rate, sender wake-up lag, and its CPU use (and the server's), per offered rate.
The server is ``python -m predictor`` (uvicorn + uvloop + httptools, one process) serving the same
200-tree depth-6 TTFT + TPOT bundle as ``bench.predictor.service`` (its helpers build it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import math
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from bench.common.procstat import free_port
from bench.predictor.service import DEPTH, TREES, ours, publish, rows, train_files, wrk

CONNECTIONS = 8
TFD_TIMER_ABSTIME = 1
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


class Itimerspec(ctypes.Structure):
    _fields_ = [("interval_s", ctypes.c_long), ("interval_ns", ctypes.c_long),
                ("value_s", ctypes.c_long), ("value_ns", ctypes.c_long)]


class Timer:
    """A ``timerfd`` on CLOCK_MONOTONIC (the clock of ``time.perf_counter`` on Linux), armed at absolute
    instants: epoll wakes on it with ns resolution, unlike an epoll timeout (ms)."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.timerfd_create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")
        self.spec = Itimerspec()

    def arm(self, at: float) -> None:
        at = max(at, 1e-6)
        self.spec.value_s, self.spec.value_ns = int(at), int((at % 1.0) * 1e9) or 1
        if self.libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(self.spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        os.close(self.fd)


class Run:
    """One open-loop phase: ``n`` requests at ``offsets`` (s after t0) over ``CONNECTIONS`` connections.

    Single thread, one epoll over the sockets and a timerfd: no GIL hand-offs between a sender and a
    receiver, so the generator's own delay stays in the tens of µs."""

    def __init__(self, port: int, payload: bytes, offsets: np.ndarray) -> None:
        self.payload, self.offsets, self.n = payload, offsets, len(offsets)
        self.conns = [Conn(socket.create_connection(("127.0.0.1", port), timeout=10)) for _ in range(CONNECTIONS)]
        for c in self.conns:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sock.settimeout(None)
        self.by_fd = {c.sock.fileno(): c for c in self.conns}
        self.idle: collections.deque[Conn] = collections.deque(self.conns)
        self.pending: collections.deque[int] = collections.deque()
        self.sent = np.full(self.n, np.nan)
        self.done = np.full(self.n, np.nan)
        self.wake_lag = np.full(self.n, np.nan)
        self.status_bad = 0
        self.completed = 0
        self.next = 0
        self.t0 = 0.0

    def _send(self, conn: Conn, i: int) -> None:
        conn.index = i
        self.sent[i] = time.perf_counter()
        conn.sock.sendall(self.payload)

    def _due(self, timer: Timer) -> None:
        """Timer fired: dispatch every request whose scheduled instant has passed, re-arm for the next."""
        timer.clear()
        now = time.perf_counter()
        t0, offsets = self.t0, self.offsets
        while self.next < self.n and t0 + offsets[self.next] <= now:
            i = self.next
            self.wake_lag[i] = now - (t0 + offsets[i])
            if self.idle:
                self._send(self.idle.popleft(), i)
            else:
                self.pending.append(i)
            self.next += 1
        if self.next < self.n:
            timer.arm(t0 + offsets[self.next])

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

    def _readable(self, conn: Conn) -> None:
        chunk = conn.sock.recv(262144)
        if not chunk:
            raise RuntimeError("server closed a connection")
        conn.buf += chunk
        if self._response(conn):
            if self.pending:
                self._send(conn, self.pending.popleft())
            else:
                self.idle.append(conn)

    def go(self, drain_s: float) -> float:
        """Run the phase; returns wall seconds from t0 to the last completion (or the drain deadline)."""
        timer, poller = Timer(), select.epoll()
        for fd in (timer.fd, *self.by_fd):
            poller.register(fd, select.EPOLLIN)
        self.t0 = time.perf_counter() + 0.05
        deadline = self.t0 + float(self.offsets[-1]) + drain_s
        timer.arm(self.t0 + self.offsets[0])
        try:
            while self.completed < self.n and time.perf_counter() < deadline:
                for fd, _ in poller.poll(0.1):
                    if fd == timer.fd:
                        self._due(timer)
                    else:
                        self._readable(self.by_fd[fd])
        finally:
            poller.close()
            timer.close()
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
    own = lat - run.wake_lag[keep] * 1e3  # from the instant the generator woke for it: its own lag removed
    lat, own = lat[~np.isnan(lat)], own[~np.isnan(own)]
    sent = run.sent[~np.isnan(run.sent)]
    wall = wall1 - wall0
    return {
        "offered": rate, "sent_rate": (len(sent) - 1) / max(float(sent.max() - sent.min()), 1e-9),
        "done_rate": run.completed / span, "n": float(keep.sum()), "lost": float(lost),
        "p50": float(np.percentile(lat, 50)), "p90": float(np.percentile(lat, 90)),
        "p99": float(np.percentile(lat, 99)), "p999": float(np.percentile(lat, 99.9)), "max": float(lat.max()),
        "bad": float(run.status_bad), "gen_cpu": (cpu1 - cpu0) / wall * 100, "srv_cpu": (srv1 - srv0) / wall * 100,
        "wake_max_us": float(np.nanmax(run.wake_lag[keep])) * 1e6,
        "wake_p99_us": float(np.percentile(run.wake_lag[keep], 99)) * 1e6,
        "own_p50": float(np.percentile(own, 50)), "own_p99": float(np.percentile(own, 99)),
    }


def warm(port: int, payloads: dict[str, bytes]) -> None:
    for payload in payloads.values():
        run = Run(port, payload, np.arange(400) / 400.0)
        run.go(5.0)
        assert run.status_bad == 0 and run.completed == 400, "warm-up failed"


def combine(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Median of every figure over rounds (sums for error counts), plus the p99 range."""
    out = {k: (sum if k in ("bad", "lost") else statistics.median)(r[k] for r in rounds) for k in rounds[0]}
    out["p99_min"], out["p99_max"] = min(r["p99"] for r in rounds), max(r["p99"] for r in rounds)
    return out


def table(results: list[tuple[str, int, dict[str, float]]]) -> str:
    out = ["| endpoint | offered calls/s | rows/s | sent / completed calls/s | p50 ms | p90 ms | p99 ms | p99.9 ms "
           "| max ms | p99 range over rounds | p50 / p99 without generator lag | non-200 / lost | server CPU % "
           "| generator CPU % | generator wake lag p99 / max µs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, per_call, r in results:
        rows_s = f"{r['offered'] * per_call:,.0f}" if per_call else "–"
        out.append(f"| {label} | {r['offered']:,.0f} | {rows_s} | {r['sent_rate']:,.0f} / {r['done_rate']:,.0f} | "
                   f"{r['p50']:.3f} | {r['p90']:.3f} | {r['p99']:.3f} | {r['p999']:.3f} | {r['max']:.2f} | "
                   f"{r['p99_min']:.2f}–{r['p99_max']:.2f} | {r['own_p50']:.3f} / {r['own_p99']:.3f} | "
                   f"{r['bad']:.0f} / {r['lost']:.0f} | {r['srv_cpu']:.0f} | {r['gen_cpu']:.0f} | "
                   f"{r['wake_p99_us']:,.0f} / {r['wake_max_us']:,.0f} |")
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
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over all scenarios; medians")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-openloop-"))
    root = work / "bundles"
    publish(root, 1, train_files())
    bodies = {"single": orjson.dumps(rows(1, 2)[0]), "bulk": orjson.dumps({"requests": rows(100, 1)}), "none": b""}
    load_start = os.getloadavg()
    print(f"# bench.predictor.openloop — {TREES} trees depth {DEPTH}, {CONNECTIONS} keep-alive connections, "
          f"{args.arrivals} arrivals, {args.duration:g} s measured (+{args.warmup:g} s warm-up) per rate, "
          f"machine: {os.cpu_count()} cores, load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / "
          f"{load_start[2]:.2f}\n", flush=True)
    port = free_port()
    runs: list[list[dict[str, float]]] = [[] for _ in SCENARIOS]
    with ours(root, port) as proc:
        payloads = {k: request_bytes("POST", p, port, bodies[k]) for k, p in
                    (("single", "/predict"), ("bulk", "/predict/bulk/strict"))}
        warm(port, payloads)
        for round_no in range(args.rounds):
            for (label, method, path, kind, _, rate), per in zip(SCENARIOS, runs, strict=True):
                per.append(measure(port, proc.pid, request_bytes(method, path, port, bodies[kind]), rate, args))
                print(f"  round {round_no + 1}: {label} @ {rate}/s p50 {per[-1]['p50']:.3f} p99 {per[-1]['p99']:.3f}"
                      f" ms, wake lag p99 {per[-1]['wake_p99_us']:.0f} µs, max {per[-1]['wake_max_us']:.0f} µs",
                      file=sys.stderr, flush=True)
        reference = wrk_reference(port, bodies["single"], work)
    results = [(s[0], s[4], combine(per)) for s, per in zip(SCENARIOS, runs, strict=True)]
    print(table(results))
    print(f"\n{reference}")
    end = os.getloadavg()
    print(f"\nload average at end {end[0]:.2f} / {end[1]:.2f} / {end[2]:.2f}")
    if any(math.isnan(r["p50"]) for _, _, r in results):  # pragma: no cover
        sys.exit("no completions in some phase")


if __name__ == "__main__":
    main()
