"""``bench/results/scaling/RESULTS-fanout.md`` rendered from the parts' JSON in ``bench/out/`` (hand-written text
below the marker line of that file is kept)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from bench.scaling.fanout_common import HAND_MARKER, OUT, REPO, RESULTS


def num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def _part(name: str) -> dict[str, Any] | None:
    path = OUT / f"fanout-{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _bundle(b: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [f"## 1. Bundle size as the trainer publishes it (measured {b['measured_at']})", "",
              "In-process `TrainerService`, default fit settings (candidates `depth6,depth3` on the physical base, "
              "location booster + one p50/p90/p99 booster per model, 20,000 quantile-fit rows), fed "
              "`bench/common/synthetic.py` rows (half TTFT, half TPOT kind), one `RetrainLoop.run_cycle()`.", "",
              "| rows per model | window TTFT / TPOT (train + holdout) | chosen TTFT / TPOT | rounds loc + q "
              "TTFT / TPOT | manifest.json | ttft.ubj + ttft-location.ubj | tpot.ubj + tpot-location.ubj | "
              "**download per predictor** (raw / gzip) | cycle wall | cycle CPU | load avg |",
              "|--:|---|---|---|--:|--:|--:|--:|--:|--:|---|"]
    for r in b["runs"]:
        f, w, m = r["files"], r["window"], r["models"]

        def kb(*names: str, f: dict[str, Any] = f) -> str:
            return f"{sum(f.get(n, {}).get('bytes', 0) for n in names) / 1024:,.0f} KiB"
        lines.append(
            f"| {r['rows_per_model']:,} | {w['ttft']['train']:,} + {w['ttft']['test']:,} / "
            f"{w['tpot']['train']:,} + {w['tpot']['test']:,} | {m['ttft']['candidate']} / {m['tpot']['candidate']} "
            f"| {m['ttft']['location_rounds']} + {m['ttft']['quantile_rounds']} / {m['tpot']['location_rounds']} + "
            f"{m['tpot']['quantile_rounds']} | {kb('manifest.json')} | {kb('ttft.ubj', 'ttft-location.ubj')} | "
            f"{kb('tpot.ubj', 'tpot-location.ubj')} | **{r['download_bytes'] / 2**20:.2f} MiB** / "
            f"{r['download_gzip_bytes'] / 2**20:.2f} MiB | {r['cycle_wall_s']:.2f} s | "
            f"{r['cycle_cpu_s']:.2f} CPU-s | {r['load_before']} → {r['load_after']} |")
    lines += ["", "Download = `manifest.json` + the four `.ubj` files (what `predictor/sources.py` fetches); "
              "gzip -6 for an object store or a compressing relay (the pull API sends them uncompressed). "
              "Cycle CPU = process CPU of the whole cycle (both models' candidates, quantile boosters, "
              "calibration, champion/challenger, write + fsync + load).", ""]
    return lines


def _longpoll(lp: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [f"## 2. Trainer holding N long-polls; fan-out of a new bundle (measured {lp['measured_at']})", "",
              f"Trainer = `trainer.app.create_app` served by uvicorn as `python -m trainer` does, on the data dir "
              f"of part 1 ({lp['rows_per_model']:,} rows per model replayed into the window, the fitted bundle "
              f"live), retrain loop off. RSS at start {lp['rss_start_mb'][0]:.0f} MB. N clients in one separate "
              f"uvloop process, one keep-alive connection each, the predictor's requests: `GET "
              f"/bundle/manifest?wait_s={lp['wait_s']:g}` + `If-None-Match`, on 304 again at once, on 200 every "
              "file of the manifest in turn. Connections opened over 1 s, so renewals are spread like those of "
              "independent predictors. Publish = `POST /_bench/publish` (bench-only route): the live models "
              "carried into version N+1 through the trainer's own `Retrainer._publish` (write + fsync + load + "
              "swap + wake), as a cycle that publishes does — the fit itself is not in these figures.", "",
              "**Idle** (all N held, no publish):", "",
              "| N | held | window s | trainer CPU-s per minute | per 100 connections | renewals (304) in window | "
              "trainer RSS MB | client CPU-s per minute | load avg |",
              "|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    base = next((r["idle_cpu_s_per_min"] for r in lp["rounds"] if r["n"] == 0), 0.0)
    for r in lp["rounds"]:
        per100 = (r["idle_cpu_s_per_min"] - base) / r["n"] * 100 if r["n"] else float("nan")
        lines.append(f"| {r['n']} | {r['held']} | {r['idle_s']:.1f} | {r['idle_cpu_s_per_min']:.3f} | "
                     f"{'–' if not r['n'] else f'{per100:.3f}'} | {r['renewals']} | {r['rss_idle_mb']:.0f} | "
                     f"{r['idle_client_cpu_s'] / r['idle_s'] * 60:.2f} | {r['load_start']} |")
    lines += ["", "Per 100 connections = (CPU at N − CPU at N = 0) / N × 100. A held request wakes once a second "
              "(`trainer/live.py` SLICE_S: it checks whether the client is gone) and is renewed every "
              f"{lp['wait_s']:g} s.", "", "**Fan-out** (one publish at a time, every client holding):", "",
              "| N | publish | clients done | first manifest p50 / max s | download done p50 / p90 / max s | "
              "trainer CPU: publish / serving s | serving CPU per client ms | MiB sent | trainer RSS / HWM after "
              "MB | client CPU s | load avg (end) |",
              "|--:|--:|--:|---|---|---|--:|--:|---|--:|---|"]
    for r in lp["rounds"]:
        for x in r["fanouts"]:
            fm, dn = x["first_manifest_s"], x["done_s"]
            per = x["serving_cpu_s"] / r["n"] * 1e3 if r["n"] else float("nan")
            lines.append(
                f"| {r['n']} | v{x['version']} | {x['clients_done']} | {num(fm['p50'])} / {num(fm['max'])} | "
                f"{num(dn['p50'])} / {num(dn['p90'])} / **{num(dn['max'])}** | {x['publish_cpu_s']:.3f} / "
                f"{x['serving_cpu_s']:.3f} | {'–' if not r['n'] else f'{per:.2f}'} | "
                f"{x['bytes_total'] / 2**20:,.0f} | {r['rss_after_mb']:.0f} / {r['hwm_after_mb']:.0f} | "
                f"{x['client_cpu_s']:.2f} | {r['load_end']} |")
    lines += ["", "Times from the moment the new version was live on the trainer (same monotonic clock in both "
              "processes). Serving CPU = trainer process CPU from just before the publish until the last client "
              "had every file, minus the publish thread's own CPU. The clients share the 2 cores with the "
              "trainer, so the fan-out times are upper bounds for a trainer on its own cores.", ""]
    return lines


def _predictor(p: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    m = p["models"]
    lines += [f"## 3. Predictor CPU per bulk call, current bundle format (measured {p['measured_at']})", "",
              f"`python -m predictor --bundle-dir` serving part 1's bundle ({p['rows_per_model']:,} rows per "
              f"model: TTFT {m['ttft']['candidate']} {m['ttft']['location_rounds']} + "
              f"{m['ttft']['quantile_rounds']} rounds, TPOT {m['tpot']['candidate']} "
              f"{m['tpot']['location_rounds']} + {m['tpot']['quantile_rounds']} rounds, p50/p90/p99), default "
              f"settings; `wrk -t1 -c{p['conns']} -d{p['seconds']}s` on `POST /predict/bulk/strict` (closed "
              "loop; wrk is a separate C process). Server CPU from `/proc/<pid>/stat` over each run. The same "
              f"runs, interleaved with these ({p['rounds']} rounds, medians), on the **reference bundle** that "
              "[RESULTS-predictor.md](../predictor/RESULTS-predictor.md) was measured with (one "
              "`reg:quantileerror` booster of 200 trees, depth 6, one output, per model).", "",
              "| bundle | evaluator | rows per call | calls/s | p50 ms | p99 ms | server busy (cores) | "
              "**server CPU ms per call** (per round) | **rows per CPU-second** | non-2xx | RSS / peak MB | "
              "load avg (first round) |",
              "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"]
    names = {"current": "current (trainer-published)", "reference": "reference (RESULTS-predictor.md)"}
    for key, v in p["variants"].items():
        ev = "/".join(sorted(set(v["evaluator"].values())))
        for s in v["sizes"]:
            rounds_ms = ", ".join(f"{x:.2f}" for x in s["cpu_ms_per_call_rounds"])
            lines.append(f"| {names[key]} | {ev} | {s['rows']} | {s['calls_per_s']:,.0f} | {s['p50_ms']:.2f} | "
                         f"{s['p99_ms']:.2f} | {s['server_busy']:.2f} | **{s['cpu_ms_per_call']:.3f}** "
                         f"({rounds_ms}) | **{s['rows_per_cpu_s']:,.0f}** | {s['non2xx']} | {v['rss_mb']:.0f} / "
                         f"{v['hwm_mb']:.0f} | {s['loads'][0]} |")
    lines += ["", "Rows per CPU-second = rows per call ÷ server CPU per call: what one fully busy predictor "
              "process (one core) serves at that call size.", ""]
    return lines


def _scrape(s: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [f"## 4. Router scrape cost per pod (measured {s['measured_at']})", "",
              "K simulated pods (`python -m sim.pod --count K`, one process). (a) `python -m router_client` with "
              "one pool of those K pods, no trainer, no predictor, no traffic: its CPU is its background work, "
              f"mostly the `/metrics` scrape of every pod every {s['interval_s']:g} s (`scraper.interval_s` "
              "default). (b) Right after, the router library's `MetricsScraper` alone in the bench process "
              "(same code, passes counted): achieved scrape rate and CPU per scrape. CPU from `/proc/<pid>/stat` "
              "and `time.process_time()`.", "",
              "| pods | (a) proxy CPU ms/s | (a) per pod | (b) scrapes/s per pod | (b) **CPU µs per scrape** | (b) "
              "CPU ms/s | pod process CPU ms/s per pod (serving /metrics) | /metrics bytes | proxy RSS MB | "
              "load avg |", "|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in s["runs"]:
        lib = r["library"]
        lines.append(f"| {r['pods']} | {r['router_cpu_ms_per_s']:.1f} | {r['router_cpu_ms_per_pod_s']:.2f} | "
                     f"{lib['scrapes_per_pod_s']:.1f} | **{lib['cpu_us_per_scrape']:.0f}** | "
                     f"{lib['cpu_ms_per_s']:.1f} | {r['pods_cpu_ms_per_pod_s']:.2f} | {r['metrics_bytes']:,} | "
                     f"{r['router_rss_mb']:.0f} | {r['load_before']} → {r['load_after']} |")
    lines += ["", "Scrapes per pod fall below the nominal 10/s when a pass over all pods takes a while (the next "
              "pass starts `interval_s` after the previous one ended). The simulator's exposition is the size "
              "shown; a real vLLM `/metrics` (histograms per model name) may be larger — not measured here.", ""]
    return lines


def render() -> str:
    lines = ["# Bundle fan-out and scale-out figures (bench/scaling/fanout.py)", "",
             "Inputs of [docs/scaling.md](../../../docs/scaling.md). Command: "
             "`.venv/bin/python -m bench.scaling.fanout --only <part>` (parts: bundle, longpoll, predictor, scrape; "
             "one to two minutes each). Machine: "
             f"**{os.cpu_count()} cores** (x86_64, CPython {sys.version.split()[0]}), loopback HTTP, shared with other "
             "engineers' jobs: the 1-minute / 5-min / 15-min load average is recorded next to every figure.", ""]
    for name, section in (("bundle", _bundle), ("longpoll", _longpoll), ("predictor", _predictor),
                          ("scrape", _scrape)):
        data = _part(name)
        if data:
            lines += section(data)
    return "\n".join(lines)


def write_results() -> None:
    hand = ""
    if RESULTS.exists():
        text = RESULTS.read_text()
        if HAND_MARKER in text:
            hand = text[text.index(HAND_MARKER):]
    RESULTS.write_text(render() + "\n" + (hand or HAND_MARKER + "\n"))
    print(f"wrote {RESULTS.relative_to(REPO)}")
