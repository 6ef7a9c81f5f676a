"""Replay a trainer's durable sample log through a fresh trainer, offline, and score what it would have served.

``python -m bench.trainer.learning_replay (--suite DIR | --log DIR [--requests CSV] ...) [--seed-dir SEED]
[--set KEY=VALUE ...] --out F.json``

``--suite bench/results/real_engine/learning-logs`` replays the 14 logs committed there (the trainers of the
real-engine routing runs, conv and code, six policies and the predicted-latency run with the deployed-shape seed;
each with its per-request CSV), with ``--seed-dir`` the seed of ``sim.prior_seed --profile
demo/profiles/tiny-llama.json`` (the profile's physical base; without it the default base).

Each ``--log`` is a trainer's ``log/`` directory (e.g. a ``bench.real_engine`` work directory's
``POLICY/trainer-engine/log``). Its records are fed, in their stored order and with their stored wall times, into a
``trainer.service.TrainerService`` that never listens (its own data directory under a temporary path): before a
record is added, each of its rows is predicted by the bundle that was live when the request was dispatched (its
completion minus TTFT and decode: the p90 the trainer would have served it, minus the router's per-pod
correction), and the retrain cycle runs whenever the record's wall time passes the next retrain tick — the
trainer's own cycle code (base and tree fits, publish sweep, challenger tests, shift bound), in the log's time.
Settings are the trainer's (``--set`` overrides any field, e.g. ``base_prior_rows=10``; ``--seed-dir`` =
``LATENCY_SEED_DIR``).

Per log and model: served p90 coverage and pinball over all rows, over the rows after ``--after-s`` seconds (the
real-engine learning target's 60 s) and per ``--window-s`` window; the versions published; the *records* after
``--after-s`` (rows slower than every row dispatched ≥ 5 s before them: ``ceiling_after`` = the coverage a p90 that
stays within what the pool has shown cannot exceed; ``records_expected``: how many exchangeable rows would be).
Offline and deterministic (one thread per fit), so settings can be compared on the same rows.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.common import results
from demo.binomial import at_least
from shared.features import MODEL_NAMES, TARGET_OF
from shared.model import LoadedBundle
from shared.trainer_settings import TrainerSettings
from trainer.fit import matrix_columns
from trainer.service import TrainerService
from trainer.store.log import LogLimits, SampleLog
from trainer.store.record import STORED_FIELDS, RowsRecord


@dataclass
class Served:
    """Per model: (seconds since the first row, served p90, actual) of every row with a target."""

    at: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODEL_NAMES})
    pred: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODEL_NAMES})
    actual: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODEL_NAMES})


def records(log_dir: Path) -> list[RowsRecord]:
    with tempfile.TemporaryDirectory() as tmp:  # SampleLog opens for append; read a copy, never the original
        copy = Path(tmp) / "log"
        copy.mkdir()
        for seg in sorted(log_dir.iterdir()):
            (copy / seg.name).write_bytes(seg.read_bytes())
        log = SampleLog(copy, LogLimits())
        try:
            return [r for r in log.replay() if isinstance(r, RowsRecord)]
        finally:
            log.close()


@dataclass
class Dispatches:
    """When requests were dispatched, from a ``bench.real_engine`` per-request CSV: rows are matched by prompt
    length and router-measured TTFT (the stored row holds both; it does not hold the output length, so without
    the CSV a row counts as dispatched at its completion minus its TTFT, which credits it a model newer by its
    decode time)."""

    by_key: dict[tuple[int, int], float]
    wall0: float | None = None

    @classmethod
    def read(cls, path: Path | None) -> Dispatches:
        if path is None:
            return cls({})
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if r["status"] == "200" and r["router_ttft_ms"]]
        return cls({(int(r["prompt_tokens"]), round(float(r["router_ttft_ms"]) * 10)): float(r["dispatch_offset_s"])
                    for r in rows})

    def at(self, record: RowsRecord, first_wall: float) -> np.ndarray:
        m = record.matrix
        ttft = np.nan_to_num(m[:, STORED_FIELDS.index("actual_ttft_ms")])
        out = record.wall_time - ttft / 1000.0
        if not self.by_key:
            return out
        if self.wall0 is None:  # the first record anchors the CSV's offsets to the log's wall clock
            first = self._offset(m[0])
            self.wall0 = first_wall - ttft[0] / 1000.0 - (first or 0.0)
        for i, row in enumerate(m):
            offset = self._offset(row)
            if offset is not None and self.wall0 is not None:
                out[i] = self.wall0 + offset
        return out

    def _offset(self, row: np.ndarray) -> float | None:
        key = (int(row[STORED_FIELDS.index("input_token_length")]),
               round(float(row[STORED_FIELDS.index("actual_ttft_ms")]) * 10))
        return self.by_key.get(key)


def _observe(history: list[tuple[float, LoadedBundle]], at: np.ndarray, record: RowsRecord, zero: bool,
             out: Served) -> None:
    """Score the record's rows against the bundle that was live when each was dispatched (``at``)."""
    served_by = np.maximum(np.searchsorted([t for t, _ in history], at, side="right") - 1, 0)
    for name in MODEL_NAMES:
        y = record.matrix[:, STORED_FIELDS.index(TARGET_OF[name])]
        keep = np.isfinite(y) & (y > 0)
        pred = np.empty(len(y))
        for k in np.unique(served_by[keep]):  # one call per bundle, not per row
            rows = keep & (served_by == k)
            pred[rows] = history[int(k)][1].predict(name, matrix_columns(name, record.matrix[rows], zero))
        out.at[name] += at[keep].tolist()
        out.pred[name] += pred[keep].tolist()
        out.actual[name] += y[keep].tolist()


def replay_log(log_dir: Path, overrides: dict[str, Any],
               dispatches: Dispatches | None = None) -> tuple[Served, list[dict[str, Any]]]:
    recs = records(log_dir)
    dispatches = dispatches or Dispatches({})
    with tempfile.TemporaryDirectory() as tmp:
        settings = TrainerSettings(**{"data_dir": str(Path(tmp) / "data"), "train_threads": 2, **overrides})
        service = TrainerService(settings)
        service.lock.acquire()
        try:
            service.bootstrap()
            served = Served()
            first_wall = recs[0].wall_time if recs else 0.0
            t0 = float(dispatches.at(recs[0], first_wall).min()) if recs else 0.0
            tick = (recs[0].wall_time if recs else 0.0) + settings.retraining_interval_sec
            live = service.live.get()
            assert live is not None
            history = [(-np.inf, live)]
            versions: list[dict[str, Any]] = []
            zero = service.params.tpot_zero_token_count
            for record in recs:
                while record.wall_time >= tick:
                    version = service.retrainer.run_once()
                    if version is not None:
                        live = service.live.get()
                        assert live is not None
                        history.append((tick, live))
                        versions.append({"at_s": round(tick - t0, 1), "version": version,
                                         "prior": [m for m in MODEL_NAMES if live.bundle.model_entry(m).prior]})
                    tick += settings.retraining_interval_sec
                service.prequential.check(service.live.get(), record.matrix)
                _observe(history, dispatches.at(record, first_wall), record, zero, served)
                service.window.add(record.first_seq, record.matrix, record.wall_time)
            for name in MODEL_NAMES:
                served.at[name] = [a - t0 for a in served.at[name]]
            return served, versions
        finally:
            service.log.close()
            service.lock.release()


def _scores(pred: np.ndarray, y: np.ndarray, alpha: float) -> dict[str, Any]:
    if not len(y):
        return {"rows": 0}
    diff = y - pred
    pinball = np.mean(np.maximum(alpha * diff, (alpha - 1) * diff))
    return {"rows": len(y), "coverage": round(float(np.mean(y <= pred)), 3), "pinball": round(float(pinball), 2),
            "median_ratio": round(float(np.median(pred / y)), 2)}


def summarise(served: Served, alpha: float, after_s: float, window_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in MODEL_NAMES:
        at, pred, y = (np.asarray(v[name], dtype=np.float64) for v in (served.at, served.pred, served.actual))
        late = at >= after_s
        windows = []
        for start in np.arange(0.0, float(at.max(initial=0.0)) + window_s, window_s):
            sel = (at >= start) & (at < start + window_s)
            if sel.any():
                windows.append({"from_s": float(start), **_scores(pred[sel], y[sel], alpha)})
        out[name] = {"all": _scores(pred, y, alpha), f"after_{after_s:g}s": _scores(pred[late], y[late], alpha),
                     "windows": windows, **record_rows(at, y, late)}
    return out


RECORD_LAG_S = 5.0
"""A row's history: the rows dispatched at least this long before it (their actuals are known by then)."""


def record_rows(at: np.ndarray, y: np.ndarray, judged: np.ndarray) -> dict[str, float]:
    """Among the ``judged`` rows, those whose actual exceeds every actual of their history (``RECORD_LAG_S``), and
    how many exchangeable rows would (Σ 1 / (history + 1)). A p90 that stays within what the pool has shown misses
    every record, so ``1 − records / rows`` bounds its coverage; far more records than expected say the judged rows
    are not exchangeable with the history, which every calibration (ours, the adaptive level's) assumes."""
    count, expected = 0, 0.0
    for i in np.flatnonzero(judged):
        history = y[at <= at[i] - RECORD_LAG_S]
        if len(history):
            count += int(y[i] > history.max())
            expected += 1.0 / (len(history) + 1)
    return {"records_after": count, "records_expected": round(expected, 2)}


WINDOW_ROWS = 10
"""A window is judged with at least this many rows."""
WINDOW_FLOOR = 0.75
AFTER_BAND = 0.03


def totals(logs: dict[str, Any], after_s: float, alpha: float = 0.9) -> dict[str, dict[str, float]]:
    """Per trace (the log directory's name up to the first ``-``) and model: pinball summed over the logs, mean
    coverage over all rows and after ``after_s``, the lowest coverage of a window with ≥ ``WINDOW_ROWS`` rows (over
    the run, and from the first publish on), and what a perfectly calibrated ``alpha``-quantile would score on the
    same pair counts (binomial, pairs independent): the chance every judged window stays ≥ ``WINDOW_FLOOR``, and
    the chance the pooled coverage after ``after_s`` lands within ``alpha`` ± ``AFTER_BAND``."""
    out: dict[str, dict[str, float]] = {}
    for path, log in logs.items():
        trace = Path(path).name.split("-")[0]
        first_fit = min((v["at_s"] for v in log["versions"]), default=float("inf"))
        for name in MODEL_NAMES:
            t = out.setdefault(f"{trace} {name}", {"logs": 0, "pinball": 0.0, "coverage": 0.0, "coverage_after": 0.0,
                                                    "lowest_window": 1.0, "lowest_window_trained": 1.0,
                                                    "calibrated_windows_chance": 1.0, "rows_after": 0,
                                                    "records_after": 0, "records_expected": 0.0})
            after = log[name][f"after_{after_s:g}s"]
            judged = [w for w in log[name]["windows"] if w["rows"] >= WINDOW_ROWS]
            t["logs"] += 1
            t["pinball"] += log[name]["all"].get("pinball", 0.0)
            t["coverage"] += log[name]["all"].get("coverage", 0.0)
            t["coverage_after"] += after.get("coverage", 0.0)
            t["rows_after"] += after.get("rows", 0)
            t["records_after"] += log[name].get("records_after", 0)
            t["records_expected"] += log[name].get("records_expected", 0.0)
            t["lowest_window"] = min([t["lowest_window"]] + [w["coverage"] for w in judged])
            t["lowest_window_trained"] = min([t["lowest_window_trained"]] + [w["coverage"] for w in judged
                                                                            if w["from_s"] >= first_fit])
            for w in judged:
                t["calibrated_windows_chance"] *= at_least(w["rows"], alpha, math.ceil(WINDOW_FLOOR * w["rows"]))
    for t in out.values():
        t["pinball"] = round(t["pinball"], 1)
        t["coverage"] = round(t["coverage"] / t["logs"], 3)
        t["coverage_after"] = round(t["coverage_after"] / t["logs"], 3)
        t["calibrated_windows_chance"] = round(t["calibrated_windows_chance"], 3)
        n = int(t["rows_after"])
        t["records_expected"] = round(t["records_expected"], 1)
        t["ceiling_after"] = round(1.0 - t["records_after"] / n, 3) if n else 1.0
        t["calibrated_after_chance"] = round(at_least(n, alpha, math.ceil((alpha - AFTER_BAND) * n - 1e-9)) -
                                             at_least(n, alpha, math.floor((alpha + AFTER_BAND) * n + 1e-9) + 1), 3)
    return out


def _parse_set(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        try:  # JSON values (numbers, true, lists, "quoted"); anything else is the string itself (empty included)
            out[key.strip()] = orjson.loads(value)
        except orjson.JSONDecodeError:
            out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.trainer.learning_replay", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--log", type=Path, action="append", default=[], help="a trainer's log/ directory")
    p.add_argument("--suite", type=Path, default=None,
                   help="a directory of logs (one per subdirectory, NAME-requests.csv beside each)")
    p.add_argument("--requests", type=Path, action="append", default=[],
                   help="the run's per-request CSV (bench.real_engine), one per --log in the same order: exact "
                        "dispatch times")
    p.add_argument("--seed-dir", type=Path, default=None, help="LATENCY_SEED_DIR: the prior to start from")
    p.add_argument("--set", action="append", default=[], help="a TrainerSettings field, KEY=VALUE (JSON values)")
    p.add_argument("--after-s", type=float, default=60.0)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    overrides = {"retraining_interval_sec": 2.0, **_parse_set(args.set)}
    if args.seed_dir is not None:
        overrides["seed_dir"] = str(args.seed_dir)
    recording = results.Run("learning-replay")
    result: dict[str, Any] = {"logs": {}}
    if args.suite is not None:
        args.log = sorted(d for d in args.suite.iterdir() if d.is_dir())
        args.requests = [d.parent / f"{d.name}-requests.csv" for d in args.log]
        if not args.log or not all(r.is_file() for r in args.requests):
            p.error(f"--suite {args.suite}: needs subdirectories NAME/ each with NAME-requests.csv beside it")
    if not args.log:
        p.error("give --suite or at least one --log")
    if args.requests and len(args.requests) != len(args.log):
        p.error("give one --requests per --log, or none")
    for i, log_dir in enumerate(args.log):
        served, versions = replay_log(log_dir, overrides,
                                      Dispatches.read(args.requests[i] if args.requests else None))
        alpha = float(overrides.get("quantile_alpha", 0.9))
        result["logs"][str(log_dir)] = {"versions": versions,
                                        **summarise(served, alpha, args.after_s, args.window_s)}
        s = result["logs"][str(log_dir)]
        print(f"{log_dir}: " + "; ".join(
            f"{m} all {s[m]['all'].get('coverage')} / {s[m]['all'].get('pinball')}, after "
            f"{s[m][f'after_{args.after_s:g}s'].get('coverage')} / {s[m][f'after_{args.after_s:g}s'].get('pinball')}"
            for m in MODEL_NAMES) + f"; {len(versions)} publishes", file=sys.stderr)
    result["totals"] = totals(result["logs"], args.after_s, float(overrides.get("quantile_alpha", 0.9)))
    for key, t in result["totals"].items():
        print(f"{key}: " + ", ".join(f"{k} {v}" for k, v in t.items()), file=sys.stderr)
    settings = {"trainer": dict(overrides), "logs": [str(d) for d in args.log], "after_s": args.after_s,
                "window_s": args.window_s}
    recording.write(args.out, settings, result, indent=2)


if __name__ == "__main__":
    main()
