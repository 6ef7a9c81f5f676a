"""The predictor without XGBoost (issue 22): peak memory after 1,000 bulk-100 calls and bulk-100 latency, before
and after, same run, same bundle.

    .venv/bin/python -m bench.bench_predictor_noxgb [--rows 20000] [--calls 1000] [--before REV] [--out F.json]

The bundle is what the trainer publishes after ``--rows`` rows per model (default settings; it carries the array
form, which an older predictor ignores). *Before* is the predictor of commit ``--before`` (default: the last one
whose predictor still evaluated with XGBoost), extracted with ``git archive`` and run as it was: XGBoost for calls
above 48 rows (bulk-100), and, for reference, its numpy evaluator for every size (``PREDICT_EVALUATOR=native``).
*After* is this tree's predictor. Every server runs from the interpreter running this script (the [dev]
virtualenv: XGBoost there imports scikit-learn and scipy), one process each, started up front; calls go over one
keep-alive loopback connection per server, ``--calls`` per server in rounds of 100 interleaved across the servers
(so other processes' load hits them alike), after 50 warm-up calls. Reported per server: p50 / p90 of the calls,
VmHWM and VmRSS after them, whether libxgboost / scikit-learn are mapped (``/proc/<pid>/maps``); plus, in this
process, the evaluation of one model on 100 rows by the numpy forest and by XGBoost.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import timeit
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from bench.bench_predictor import rows
from bench.procstat import free_port, loadavg, rss_mb
from shared.bundle import read_current
from shared.columns import to_columns

REPO = Path(__file__).resolve().parents[1]
ROUND = 100
WARMUP = 50
HEAVY = {"libxgboost": "libxgboost", "scikit-learn": "/sklearn/"}


def default_before() -> str:
    """The newest commit whose predictor evaluated with XGBoost: the parent of the commit that deleted
    ``predictor/forest.py``, or HEAD while that deletion is not committed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    deleted = git("log", "-1", "--diff-filter=D", "--format=%H", "HEAD", "--", "predictor/forest.py")
    return git("rev-parse", f"{deleted}^" if deleted else "HEAD")


def extract(rev: str, into: Path) -> Path:
    """``predictor/`` and ``shared/`` of commit ``rev`` under ``into`` (what ``python -m predictor`` imports)."""
    tar = subprocess.run(["git", "archive", rev, "predictor", "shared"], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def trainer_bundle(work: Path, per_model: int) -> Path:
    from bench.bench_trainer import feed, service
    svc = service(work / "trainer")
    try:
        feed(svc, per_model, 7)
        assert svc.loop.run_cycle() is not None, "the trainer published nothing"
        return svc.publisher.root
    finally:
        svc.stop()


@contextlib.contextmanager
def server(code: Path, bundles: Path, env: dict[str, str]) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith(("LATENCY_", "PREDICT_", "TRAINING_"))}
    full.update(PYTHONPATH=str(code), MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", PREDICT_LONG_POLL="false",
                LATENCY_LOG_LEVEL="WARNING", **env)
    proc = subprocess.Popen([sys.executable, "-m", "predictor", "--host", "127.0.0.1", "--port", str(port),
                             "--bundle-dir", str(bundles)], cwd=code, env=full, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _ready(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"predictor from {code} did not start")
            time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(30)


def _ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _call(conn: http.client.HTTPConnection, body: bytes) -> float:
    start = time.perf_counter()
    conn.request("POST", "/predict/bulk/strict", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200 and len(orjson.loads(data)["predictions"]) == 100, response.status
    return elapsed * 1e3


def _predictions(conn: http.client.HTTPConnection, body: bytes) -> list[tuple[float, float]]:
    """The (ttft_ms, tpot_ms) of every row, as the server answered them (JSON floats: exact)."""
    conn.request("POST", "/predict/bulk/strict", body, {"Content-Type": "application/json"})
    rows_out = orjson.loads(conn.getresponse().read())["predictions"]
    return [(p["ttft_ms"], p["tpot_ms"]) for p in rows_out]


def mapped(pid: int) -> dict[str, bool]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {name: needle in maps for name, needle in HEAVY.items()}


def in_process(bundles: Path) -> dict[str, float]:
    """µs to evaluate one model's raw margins for 100 rows: the folded numpy forest vs XGBoost (location booster
    first, then the quantile booster), in this process."""
    from predictor.serving import build_serving
    from shared.model import load_bundle
    from shared.predictor_settings import PredictorSettings
    bundle = read_current(bundles, None)
    assert bundle is not None
    forest, xgboost = build_serving(bundle, PredictorSettings(), "bench").loaded, load_bundle(bundle)
    cols = to_columns(rows(100, 1), ["body", "requests"])
    out = {}
    for name in ("ttft", "tpot"):
        x = forest.spec.matrix(name, cols)
        for label, model in (("forest", forest.models[name]), ("xgboost", xgboost.models[name])):
            out[f"{name}_{label}_us"] = min(timeit.repeat(partial(model.raw, x), number=200, repeat=5)) / 200 * 1e6
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-noxgb-"))
    bundles = trainer_bundle(work, args.rows)
    bundle = read_current(bundles, None)
    assert bundle is not None
    before = extract(args.before, work / "before")
    variants = {"before (XGBoost above 48 rows)": (before, {}),
                "before, its numpy evaluator for every size": (before, {"PREDICT_EVALUATOR": "native"}),
                "after (numpy forest, no XGBoost)": (REPO, {})}
    body = orjson.dumps({"requests": rows(100, 1)})
    load_start = loadavg()
    with contextlib.ExitStack() as stack:
        procs = {label: stack.enter_context(server(code, bundles, env)) for label, (code, env) in variants.items()}
        conns = {label: http.client.HTTPConnection("127.0.0.1", port, timeout=60) for label, (port, _) in procs.items()}
        for conn in conns.values():
            for _ in range(WARMUP):
                _call(conn, body)
        answers = {label: _predictions(conn, body) for label, conn in conns.items()}
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(args.calls // ROUND):
            for label, conn in conns.items():
                times[label] += [_call(conn, body) for _ in range(ROUND)]
        results = {}
        for label, (_, proc) in procs.items():
            rss, hwm = rss_mb(proc.pid)
            ms = sorted(times[label])
            results[label] = {"calls": len(ms), "p50_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * len(ms))],
                              "vmhwm_mb": hwm, "vmrss_mb": rss, "mapped": mapped(proc.pid)}
    entries = {n: bundle.model_entry(n) for n in ("ttft", "tpot")}
    first = next(iter(answers.values()))
    return {"identical_predictions": all(a == first for a in answers.values()),
            "machine": {"cores": os.cpu_count(), "load_start": load_start, "load_end": loadavg()},
            "before": args.before, "rows_per_model": args.rows, "calls": args.calls,
            "bundle": {n: e.written("candidate", "location_rounds", "quantile_rounds", "quantiles")
                       for n, e in entries.items()},
            "servers": results, "in_process": in_process(bundles)}


def markdown(r: dict[str, Any]) -> str:
    servers = r["servers"]
    base = servers["before (XGBoost above 48 rows)"]["p50_ms"]
    lines = [f"Bundle after {r['rows_per_model']:,} rows per model: " + "; ".join(
        f"{n} {b['candidate']}, {b['location_rounds']} location + {b['quantile_rounds']} × 3 quantile trees"
        for n, b in r["bundle"].items()) + f". Before = `{r['before'][:10]}`. {r['machine']['cores']} cores, load "
        f"average {r['machine']['load_start']} → {r['machine']['load_end']}.", "",
        f"| predictor | bulk-100 p50 ms | p90 ms | p50 ÷ before | VmHWM MB after {r['calls']:,} calls | VmRSS MB "
        "| libxgboost mapped | scikit-learn mapped |", "|---|---|---|---|---|---|---|---|"]
    for label, s in servers.items():
        lines.append(f"| {label} | {s['p50_ms']:.3f} | {s['p90_ms']:.3f} | {s['p50_ms'] / base:.2f} | "
                     f"{s['vmhwm_mb']:.1f} | {s['vmrss_mb']:.1f} | {s['mapped']['libxgboost']} | "
                     f"{s['mapped']['scikit-learn']} |")
    p = r["in_process"]
    lines += ["", f"Every server's 100 predictions identical (ttft_ms, tpot_ms): {r['identical_predictions']}.", "",
              "In-process, one model's raw margins for 100 rows (µs): " + ", ".join(
        f"{n} forest {p[f'{n}_forest_us']:.0f} vs XGBoost {p[f'{n}_xgboost_us']:.0f}" for n in ("ttft", "tpot"))]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--before", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.before = args.before or default_before()
    result = run(args)
    if args.out:
        args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(markdown(result))


if __name__ == "__main__":
    main()
