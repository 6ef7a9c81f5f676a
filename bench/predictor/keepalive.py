"""Keep-alive benchmark (issue 22): connections reused right around the server's idle limit, loopback only.

    .venv/bin/python -m bench.predictor.keepalive [--conns-5 100 --rounds-5 12 --conns-90 400 --rounds-90 3] [--quick]

Two predictor subprocesses serve one bench-sized bundle (200 trees depth 6 per model): ``new`` with the default
keep-alive (``LATENCY_KEEPALIVE_TIMEOUT_SEC``, 120 s) and ``baseline`` with it forced to 5 s (uvicorn's default,
what every server had before). Against each, raw keep-alive connections (asyncio streams, one request at a time)
each send ``POST /predict/bulk/strict`` (1 row), sit idle for a uniform 4.9–5.1 s (the 5 s case) or 89–91 s (the
llm-d Go client's 90 s idle limit), then reuse the connection; all connections idle in parallel and all four
(case, server) runs go at once, so both servers see the same machine. Each reuse is one of:

* ``ok``: 200 on the same connection;
* ``closed idle``: the server's FIN had arrived before the reuse — a pooled client sees it and dials again (Go's
  transport does), which costs a connection and fails nothing;
* ``failed``: the request was written into a connection the server closed without answering (EOF / reset before
  a response) — for a POST the Go client reports this as the request's error; the idle before each is kept.

A connection that failed or was closed is replaced (its fresh request is not counted). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench.common.procstat import free_port, loadavg
from bench.predictor.service import ours, publish, rows, train_files

REQUEST_TIMEOUT_S = 10.0
SERVERS = {"new (120 s)": {}, "baseline (5 s)": {"LATENCY_KEEPALIVE_TIMEOUT_SEC": "5"}}


@dataclass(frozen=True)
class Case:
    name: str
    idle_low_s: float
    idle_high_s: float
    connections: int
    rounds: int


@dataclass
class Tally:
    ok: int = 0
    closed_idle: int = 0
    failed: int = 0
    other_status: int = 0
    failed_idle_s: list[float] = field(default_factory=list)
    failure_kinds: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def reuses(self) -> int:
        return self.ok + self.closed_idle + self.failed + self.other_status


class ConnectionBroken(Exception):
    """No response on this connection: EOF, reset or timeout before the response was complete."""


class Client:
    """One keep-alive connection to ``port``; re-dialled after a failure or a close."""

    def __init__(self, port: int, request: bytes) -> None:
        self._port = port
        self._request = request
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def dial(self) -> None:
        self.close()
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)

    def server_closed(self) -> bool:
        return (self._reader is None or self._writer is None or self._reader.at_eof()
                or self._writer.is_closing())

    async def exchange(self) -> int:
        """Send the request, read the whole response; its status (``ConnectionBroken`` without one)."""
        assert self._reader is not None and self._writer is not None
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                self._writer.write(self._request)
                await self._writer.drain()
                head = await self._reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in lines
                              if line.lower().startswith(b"content-length:"))
                await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as exc:
            raise ConnectionBroken(type(exc).__name__) from None
        return int(lines[0].split()[1])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def one_connection(port: int, request: bytes, case: Case, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    client = Client(port, request)
    await client.dial()
    assert await client.exchange() == 200
    for _ in range(case.rounds):
        idle = rng.uniform(case.idle_low_s, case.idle_high_s)
        idle_from = time.monotonic()
        await asyncio.sleep(idle)
        waited = time.monotonic() - idle_from
        if client.server_closed():
            tally.closed_idle += 1
        else:
            try:
                status = await client.exchange()
            except ConnectionBroken as exc:
                tally.failed += 1
                tally.failed_idle_s.append(waited)
                tally.failure_kinds[str(exc)] = tally.failure_kinds.get(str(exc), 0) + 1
            else:
                if status == 200:
                    tally.ok += 1
                else:
                    tally.other_status += 1
                continue
        await client.dial()
        assert await client.exchange() == 200
    client.close()


async def run_case(port: int, request: bytes, case: Case, seed: int) -> Tally:
    tally = Tally()
    started = time.monotonic()
    await asyncio.gather(*(one_connection(port, request, case, seed * 100_003 + i, tally)
                           for i in range(case.connections)))
    tally.seconds = time.monotonic() - started
    return tally


async def run_all(ports: dict[str, int], request: bytes, cases: list[Case]) -> dict[tuple[str, str], Tally]:
    keys = [(case.name, server) for case in cases for server in ports]
    tallies = await asyncio.gather(*(run_case(ports[server], request, case, seed)
                                     for seed, case in enumerate(cases) for server in ports))
    return dict(zip(keys, tallies, strict=True))


def report(results: dict[tuple[str, str], Tally], cases: list[Case], load: tuple[str, str]) -> str:
    out = [f"load average before / after: {load[0]} / {load[1]}", "",
           "| idle before reuse | server keep-alive | reuses | ok | closed idle (re-dialled) | failed (EOF / reset) "
           "| idle of the failures (s) | wall s |", "|---|---|---|---|---|---|---|---|"]
    for case in cases:
        for server in SERVERS:
            t = results[(case.name, server)]
            idles = (f"{min(t.failed_idle_s):.3f}–{max(t.failed_idle_s):.3f}" if t.failed_idle_s else "–")
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(t.failure_kinds.items()))
            failed = f"{t.failed}" + (f" ({kinds})" if kinds else "")
            other = f" (+{t.other_status} non-200)" if t.other_status else ""
            out.append(f"| {case.name} ({case.connections} conns × {case.rounds}) | {server} | {t.reuses}{other} "
                       f"| {t.ok} | {t.closed_idle} | {failed} | {idles} | {t.seconds:.0f} |")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.predictor.keepalive", description=__doc__.split("\n")[0])
    parser.add_argument("--conns-5", type=int, default=100)
    parser.add_argument("--rounds-5", type=int, default=12)
    parser.add_argument("--conns-90", type=int, default=400)
    parser.add_argument("--rounds-90", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 × 2 at 5 s, no 90 s case")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [Case("4.9–5.1 s", 4.9, 5.1, args.conns_5, args.rounds_5)]
    if args.quick:
        cases = [Case("4.9–5.1 s", 4.9, 5.1, 20, 2)]
    elif args.rounds_90 > 0:
        cases.append(Case("89–91 s", 89.0, 91.0, args.conns_90, args.rounds_90))
    body = orjson.dumps({"requests": rows(1)})
    request = (b"POST /predict/bulk/strict HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n%b" % (len(body), body))
    with tempfile.TemporaryDirectory(prefix="bench-keepalive-") as work:
        root = Path(work) / "bundles"
        publish(root, 1, train_files())
        ports = {server: free_port() for server in SERVERS}
        with ours(root, ports["new (120 s)"]), ours(root, ports["baseline (5 s)"], **SERVERS["baseline (5 s)"]):
            before = loadavg()
            results = asyncio.run(run_all(ports, request, cases))
            load = (before, loadavg())
    print(report(results, cases, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
