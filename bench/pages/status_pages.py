"""Status pages: load time with a 100k-row window, server RSS, and hand-written SVG vs matplotlib.

    .venv/bin/python -m bench.pages.status_pages [--rows 100000] [--repeat 30]

1. A real trainer (subprocess, loopback) is filled to ``--rows`` rows per model in ten batches with a retrain
   after each (so the page has a retrain history and a live-error series), then ``GET /ui`` and ``GET /ui/data``
   are timed (``GET /data/status`` in the same run is the baseline), with the server's RSS before and after.
2. The router page: ``ui_data`` + ``render`` in-process for 2 pools × 8 pods, a full status history (450
   samples) and a full request log (20,000 records).
3. The renderer choice: the trainer page's eight charts drawn by ``shared.charts`` vs by matplotlib (Agg,
   as SVG and as PNG) from the same data; import time and RSS of each in a fresh interpreter.
The 1-minute load average is printed next to every figure (the machine is shared).
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common.synthetic import mixed_rows
from demo.procs import free_port


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def rss_mib(pid: int) -> tuple[float, float]:
    fields = {line.split(":")[0]: line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
              if line.startswith(("VmRSS", "VmHWM"))}
    return int(fields["VmRSS"]) / 1024, int(fields["VmHWM"]) / 1024


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[int(0.95 * (len(times) - 1))], "max": times[-1]}


def fmt(t: dict[str, float]) -> str:
    return f"{t['p50']:.1f} / {t['p95']:.1f} / {t['max']:.1f}"


def fill_trainer(url: str, rows: int, client: httpx.Client) -> None:
    rng = np.random.default_rng(7)
    batch = 2 * rows // 10
    for i in range(10):
        body = {"entries": mixed_rows(batch, rng)}
        for start in range(0, batch, 20_000):
            resp = client.post(url + "/add_training_data_bulk", json={"entries": body["entries"][start:start + 20_000]})
            resp.raise_for_status()
        deadline = time.monotonic() + 120
        while len(client.get(url + "/ui/data", params={"recent": 0}).json()["models"]["ttft"]["retrains"]) <= i:
            if time.monotonic() > deadline:
                raise RuntimeError("no retrain within 120 s")
            time.sleep(0.5)
        print(f"  batch {i + 1}/10 stored and fitted (load {load()})", flush=True)


def trainer_page(rows: int, repeat: int, tmp: Path) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "LATENCY_RETRAINING_INTERVAL_SEC": "1", "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": str(rows),
           "LATENCY_WINDOW_MAX_ROWS": str(rows), "LATENCY_LOG_LEVEL": "WARNING",
           "LATENCY_MIN_SAMPLES_FOR_RETRAIN": "100"}
    log = (tmp / "trainer.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(tmp / "data")], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=120) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get(url + "/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("trainer not ready")
                time.sleep(0.1)
            fill_trainer(url, rows, client)
            doc = client.get(url + "/ui/data").json()
            before = rss_mib(proc.pid)
            out = {"window": {m: doc["models"][m]["window"] for m in doc["models"]},
                   "retrains": len(doc["models"]["ttft"]["retrains"]), "rss_before": before,
                   "status": (timed(lambda: client.get(url + "/data/status").raise_for_status(), repeat), load()),
                   "ui": (timed(lambda: client.get(url + "/ui").raise_for_status(), repeat), load()),
                   "ui_data": (timed(lambda: client.get(url + "/ui/data").raise_for_status(), repeat), load()),
                   "html_bytes": len(client.get(url + "/ui").content), "doc": doc}
            out["rss_after"] = rss_mib(proc.pid)
            return out
    finally:
        proc.terminate()
        proc.wait(30)


def router_page(repeat: int) -> tuple[dict[str, float], str, int]:
    from router_client.config import RouterConfig
    from router_client.request_log import RequestLog
    from router_client.router import Decision, Router
    from router_client.status_history import StatusHistory
    from router_client.ui_data import ui_data
    from router_client.ui_page import render

    pools: list[dict[str, Any]] = [
        {"name": name, "pods": [f"http://127.0.0.1:{base + i}" for i in range(8)], "max_context": ctx}
        for name, base, ctx in (("short", 9000, 4096), ("long", 9100, 32768))]
    router = Router(RouterConfig.model_validate({"pools": pools}))
    history, log = StatusHistory(), RequestLog()
    now = time.time()
    for k in range(450):
        history.sample(router.status(), now - 2 * (450 - k))
    rng = np.random.default_rng(1)
    for k in range(20_000):
        pool = pools[k % 2]
        d = Decision(f"r{k}", str(pool["name"]), str(pool["pods"][k % 8]), False, "ok", float(rng.uniform(20, 200)),
                     float(rng.uniform(3, 20)), raw_predicted_ttft_ms=50.0, raw_predicted_tpot_ms=8.0)
        log.add(d, float(rng.uniform(10, 250)), float(rng.uniform(2, 25)), 100, None, 1.0, 1.001, 500.0)
    html = render(ui_data(router, history, log), 5)
    return timed(lambda: render(ui_data(router, history, log), 5), repeat), load(), len(html)


def mpl_page(doc: dict[str, Any], fmt_: str) -> int:
    """The trainer page's charts with matplotlib (Agg): 2 lines + scatter + bars per model, and the ingest line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size, now = 0, doc["now"]

    def save(fig: Any) -> None:
        nonlocal size
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt_)
        plt.close(fig)
        size += len(buf.getvalue()) if fmt_ == "svg" else len(base64.b64encode(buf.getvalue()))

    for m in doc["models"].values():
        for key in ("coverage", "pinball"):
            fig, ax = plt.subplots(figsize=(5.2, 2.3), dpi=100)
            ax.plot([p["at"] - now for p in m["live_series"]], [p[key] for p in m["live_series"]])
            ax.plot([r["at"] - now for r in m["retrains"]], [r[key] for r in m["retrains"]], "o")
            save(fig)
        fig, ax = plt.subplots(figsize=(5.2, 2.6), dpi=100)
        pred, actual = m["recent"]["predicted"], m["recent"]["actual"]
        order = np.argsort(pred["0.9"])
        ax.fill_between(np.array(pred["0.9"])[order], np.array(pred["0.5"])[order], np.array(pred["0.99"])[order],
                        alpha=0.3)
        ax.scatter(pred["0.9"], actual, s=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        save(fig)
        fig, ax = plt.subplots(figsize=(5.2, 2.6), dpi=100)
        items = list(m["live_entry"]["importances"].items())[:12]
        ax.barh([k for k, _ in items], [v for _, v in items])
        save(fig)
    fig, ax = plt.subplots(figsize=(5.2, 2.3), dpi=100)
    ax.plot([p[0] - now for p in doc["ingest"]["series"]], [p[1] for p in doc["ingest"]["series"]])
    save(fig)
    return size


IMPORT_PROBE = """
import time, sys
def rss():
    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024
before = rss(); start = time.perf_counter()
{imports}
print(f"{{(time.perf_counter() - start) * 1000:.1f}} {{rss() - before:.1f}}")
"""


def import_cost(imports: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(imports=imports)], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1])


def renderers(doc: dict[str, Any], repeat: int) -> list[str]:
    from trainer.ui_page import render

    hand = timed(lambda: render(doc, 5), repeat)
    hand_bytes = len(render(doc, 5))
    mpl_svg = timed(lambda: mpl_page(doc, "svg"), max(3, repeat // 3))
    mpl_png = timed(lambda: mpl_page(doc, "png"), max(3, repeat // 3))
    imp_hand = import_cost("import shared.charts")
    imp_mpl = import_cost("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot")
    return ["| renderer | page render p50 / p95 / max ms | charts bytes | import ms | import RSS MiB | load |",
            "|---|---|---|---|---|---|",
            f"| shared.charts (hand SVG, whole page) | {fmt(hand)} | {hand_bytes:,} (whole page) | {imp_hand[0]:.0f} "
            f"| {imp_hand[1]:.1f} | {load()} |",
            f"| matplotlib Agg → SVG (8 charts only) | {fmt(mpl_svg)} | {mpl_page(doc, 'svg'):,} | {imp_mpl[0]:.0f} "
            f"| {imp_mpl[1]:.1f} | {load()} |",
            f"| matplotlib Agg → PNG base64 (8 charts) | {fmt(mpl_png)} | {mpl_page(doc, 'png'):,} | (same) | (same) "
            f"| {load()} |"]


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--rows", type=int, default=100_000)
    cli.add_argument("--repeat", type=int, default=30)
    opts = cli.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"filling a trainer with {opts.rows:,} rows per model ...", flush=True)
        t = trainer_page(opts.rows, opts.repeat, Path(tmp))
    print(f"\nwindow {t['window']}, {t['retrains']} retrains in the history, page {t['html_bytes']:,} bytes")
    print("\n| trainer endpoint | p50 / p95 / max ms | load |\n|---|---|---|")
    for key, label in (("status", "GET /data/status (baseline)"), ("ui", "GET /ui"), ("ui_data", "GET /ui/data")):
        print(f"| {label} | {fmt(t[key][0])} | {t[key][1]} |")
    print(f"\ntrainer RSS MiB (VmRSS, VmHWM): before the page views {t['rss_before'][0]:.0f} / "
          f"{t['rss_before'][1]:.0f}, after {opts.repeat * 2} views {t['rss_after'][0]:.0f} / {t['rss_after'][1]:.0f}")
    r, r_load, r_bytes = router_page(opts.repeat)
    print(f"\nrouter page (2 pools × 8 pods, 450 samples, 20k requests): ui_data + render {fmt(r)} ms, "
          f"{r_bytes:,} bytes (load {r_load})")
    print("\n" + "\n".join(renderers(t["doc"], opts.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
