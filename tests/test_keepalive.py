"""Idle keep-alive connections outlive uvicorn's old 5 s default on all three servers (issue 22).

Real subprocesses on 127.0.0.1 — trainer, predictor and router proxy as their command lines start them — and one
``http.client`` connection per server: a request, ~5.5 s idle (past the old limit), then the same connection
(same local port) again, answered. A predictor started with ``LATENCY_KEEPALIVE_TIMEOUT_SEC=5`` is the control:
it closes the idle connection (so the idle wait does reach past a 5 s limit, and the setting is what keeps the
others open). The four connections idle in parallel threads: one wait for all.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from tests.predictor.conftest import build_bundle
from tests.predictor.test_refusals import ROW
from tests.procs import SMALL_TRAINER, free_port, spawn, stop, wait_ready
from tests.trainer.conftest import mixed_rows
from tests.waiting import wait_for

IDLE_S = 5.5  # past uvicorn's default keep-alive (5 s)


@dataclass(frozen=True)
class Call:
    """One request to repeat on the same connection, and the status it must get."""

    port: int
    method: str
    path: str
    body: bytes | None
    status: int


@dataclass(frozen=True)
class Outcome:
    idle_s: float
    closed_by_server: bool
    statuses: tuple[int, ...] = ()
    same_connection: bool = False


def _exchange(conn: http.client.HTTPConnection, call: Call) -> int:
    conn.request(call.method, call.path, body=call.body, headers={"content-type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def _server_closed(sock: socket.socket) -> bool:
    """The peer has closed the connection (EOF waiting), without consuming anything."""
    timeout = sock.gettimeout()
    sock.settimeout(0.0)  # a socket with a timeout polls before recv, MSG_DONTWAIT or not
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    finally:
        sock.settimeout(timeout)


def reuse_after_idle(call: Call, idle_s: float = IDLE_S) -> Outcome:
    """Request, sit idle ``idle_s``, request again on the same socket (unless the server closed it meanwhile)."""
    conn = http.client.HTTPConnection("127.0.0.1", call.port, timeout=30)
    try:
        first = _exchange(conn, call)
        assert conn.sock is not None
        sock, local = conn.sock, conn.sock.getsockname()
        idle_from = time.monotonic()
        time.sleep(idle_s)  # the idle period is what is under test
        idle = time.monotonic() - idle_from
        if _server_closed(sock):
            return Outcome(idle, closed_by_server=True, statuses=(first,))
        second = _exchange(conn, call)
        same = conn.sock is sock and sock.getsockname() == local
        return Outcome(idle, closed_by_server=False, statuses=(first, second), same_connection=same)
    finally:
        conn.close()


def closed_after_idle(call: Call, idle_s: float = IDLE_S) -> Outcome:
    """The control: request, sit idle ``idle_s``, then wait until the server has closed the connection."""
    conn = http.client.HTTPConnection("127.0.0.1", call.port, timeout=30)
    try:
        first = _exchange(conn, call)
        assert conn.sock is not None
        sock = conn.sock
        idle_from = time.monotonic()
        time.sleep(idle_s)
        closed = bool(wait_for(lambda: _server_closed(sock), timeout=30, what="server closes the idle connection"))
        return Outcome(time.monotonic() - idle_from, closed_by_server=closed, statuses=(first,))
    finally:
        conn.close()


@contextmanager
def server(module: str, args: list[str], env: dict[str, str], log: Path
           ) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = spawn(module, ["--host", "127.0.0.1", "--port", str(port), *args], env, log)
    try:
        yield port, proc
    finally:
        stop(proc)


def test_idle_connections_are_reused_after_the_old_5s_limit(tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    build_bundle(bundles, 1)
    config = tmp_path / "router.json"
    config.write_bytes(orjson.dumps({"pools": [{"name": "short", "pods": [f"http://127.0.0.1:{free_port()}"],
                                                "max_context": 4096}]}))
    predictor_env = {"LOCAL_MODEL_DIR": str(tmp_path / "local"), "PREDICT_LONG_POLL": "false"}
    with ExitStack() as stack:  # all four start at once; then each is waited for
        specs = {
            "trainer": ("trainer", ["--data-dir", str(tmp_path / "data")], SMALL_TRAINER),
            "predictor": ("predictor", ["--bundle-dir", str(bundles)], predictor_env),
            "router": ("router_client", ["--config", str(config)], {}),
            "predictor-5s": ("predictor", ["--bundle-dir", str(bundles)],
                             {**predictor_env, "LATENCY_KEEPALIVE_TIMEOUT_SEC": "5"}),
        }
        running = {name: stack.enter_context(server(module, args, env, tmp_path / f"{name}.log"))
                   for name, (module, args, env) in specs.items()}
        for name, (port, proc) in running.items():
            wait_ready(f"http://127.0.0.1:{port}", proc, tmp_path / f"{name}.log", timeout=120)

        predict = orjson.dumps({"requests": [ROW]})
        ingest = orjson.dumps({"entries": mixed_rows(5)})
        calls = {
            "trainer": Call(running["trainer"][0], "POST", "/add_training_data_bulk", ingest, 202),
            "predictor": Call(running["predictor"][0], "POST", "/predict/bulk/strict", predict, 200),
            "router": Call(running["router"][0], "GET", "/healthz", None, 200),
        }
        control = Call(running["predictor-5s"][0], "POST", "/predict/bulk/strict", predict, 200)
        with ThreadPoolExecutor(len(calls) + 1) as pool:
            futures = {name: pool.submit(reuse_after_idle, call) for name, call in calls.items()}
            baseline = pool.submit(closed_after_idle, control).result()
            outcomes = {name: future.result() for name, future in futures.items()}

    assert baseline.closed_by_server and baseline.statuses == (200,), baseline
    for name, outcome in outcomes.items():
        status = calls[name].status
        assert outcome.idle_s >= IDLE_S, (name, outcome)
        assert not outcome.closed_by_server, f"{name} closed a connection idle {outcome.idle_s:.2f} s"
        assert outcome.statuses == (status, status) and outcome.same_connection, (name, outcome)
