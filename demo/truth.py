"""Join the predictions with the quantity that is predicted, and explain the client's latency separately.

The router predicts, per pod, the p90 TTFT/TPOT that *it* will measure (upstream request sent → first
content chunk; inter-token time of the stream). The load generator sees more: its own event loop, the
loopback hop, the proxy's decision, the relay back. So coverage is computed on the router's records of
each request (``GET /ui/requests``: prediction at dispatch, router-measured latency), and the client's TTFT
is split into parts with the wall-clock stamps both sides recorded for the same request id:

    client TTFT = load generator send (request built, connection taken) + loopback + proxy accept (write,
                  accept, body read) + proxy decision + pod (router-measured TTFT) + relay → load generator read

Requests are also split by the bundle their pool's predictor served at dispatch (the untrained prior or a
trained model), by half of the run and into windows, which is what usually explains a miss; ``demo.verdict``
judges the result.
"""

from __future__ import annotations

import bisect
import csv
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.load import Record
from demo.watch import BundleSeen

TARGETS = ("ttft", "tpot")
PARTS = ("load generator send", "loopback + proxy accept", "proxy decision", "pod (router-measured TTFT)",
         "relay → load generator read")
WINDOW_S = 10.0
"""Width of the windows coverage is also judged in, from the first request a trained bundle served."""
MIN_WINDOW_PAIRS = 20
WINDOW_FLOOR = 0.75
"""A window with at least ``MIN_WINDOW_PAIRS`` pairs below this coverage fails the verdict (a dip, ``demo.verdict``)."""


@dataclass(frozen=True)
class Joined:
    request_id: str
    pool: str
    pod: str
    dispatched_at: float
    predicted: dict[str, float | None]
    raw: dict[str, float | None]
    measured: dict[str, float | None]
    client_ttft_ms: float | None
    parts_ms: dict[str, float] | None
    phase: str
    """``prior`` (the pool's predictor served the untrained prior bundle at dispatch) or ``trained``."""


def _phase(pool: str, at: float, bundles: Sequence[BundleSeen]) -> str:
    seen = sorted((b.at_wall, b.prior) for b in bundles if b.pool == pool)
    i = bisect.bisect_right([t for t, _ in seen], at)
    return "trained" if i > 0 and not seen[i - 1][1] else "prior"


def _parts(rec: Record, routed: dict[str, Any]) -> dict[str, float] | None:
    first = routed.get("first_token_at")
    if rec.ttft_ms is None or first is None or not rec.sent_wall or not rec.written_wall:
        return None
    client_first = rec.sent_wall + rec.ttft_ms / 1e3
    stamps = (rec.sent_wall, rec.written_wall, routed["received_at"], routed["dispatched_at"], first, client_first)
    return {name: (b - a) * 1e3 for name, a, b in zip(PARTS, stamps, stamps[1:], strict=False)}


def join(records: Iterable[Record], routed: dict[str, dict[str, Any]], bundles: Sequence[BundleSeen]) -> list[Joined]:
    out = []
    for rec in records:
        r = routed.get(rec.request_id)
        if r is None or r.get("error") is not None or rec.status != 200 or rec.error:
            continue
        predicted = {t: r[f"predicted_{t}_ms"] for t in TARGETS}
        raw = {t: r[f"raw_predicted_{t}_ms"] for t in TARGETS}
        out.append(Joined(rec.request_id, r["pool"], r["pod"], r["dispatched_at"], predicted, raw,
                          {t: r[f"{t}_ms"] for t in TARGETS}, rec.ttft_ms, _parts(rec, r),
                          _phase(r["pool"], r["dispatched_at"], bundles)))
    return sorted(out, key=lambda j: j.dispatched_at)


CSV_COLUMNS = ("request_id", "pool", "pod", "dispatched_s", "phase", "predicted_ttft_ms", "raw_predicted_ttft_ms",
               "ttft_ms", "predicted_tpot_ms", "raw_predicted_tpot_ms", "tpot_ms")


def write_csv(path: Path, joined: Sequence[Joined], t0: float) -> None:
    """One row per judged request (``dispatched_s`` from ``t0``, wall clock): what every coverage figure is
    computed from, for a reader who wants to look further."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(CSV_COLUMNS)
        for j in joined:
            out.writerow([j.request_id, j.pool, j.pod, round(j.dispatched_at - t0, 4), j.phase,
                          *(v for t in TARGETS for v in (j.predicted[t], j.raw[t], j.measured[t]))])


def pairs(joined: Iterable[Joined], target: str, raw: bool = False) -> list[tuple[float, float]]:
    """(predicted at dispatch, router-measured) for ``target``; ``raw``: the model's own prediction."""
    out = []
    for j in joined:
        p, m = (j.raw if raw else j.predicted)[target], j.measured[target]
        if p is not None and m is not None and m > 0:
            out.append((p, m))
    return out


def stats(sub: Sequence[tuple[float, float]]) -> dict[str, Any]:
    if not sub:
        return {"pairs": 0}
    covered = sum(m <= p for p, m in sub)
    return {"pairs": len(sub), "covered": covered, "coverage": round(covered / len(sub), 4),
            "mean_predicted_ms": round(statistics.fmean(p for p, _ in sub), 2),
            "mean_measured_ms": round(statistics.fmean(m for _, m in sub), 2),
            "mape": round(statistics.fmean(abs(p - m) / m for p, m in sub), 3)}


def windows(joined: Sequence[Joined], target: str, width: float = WINDOW_S) -> list[dict[str, Any]]:
    """Coverage per ``width``-second window, counted from the first request a trained bundle served."""
    start = min((j.dispatched_at for j in joined if j.phase == "trained"), default=None)
    if start is None:
        return []
    bins: dict[int, list[Joined]] = {}
    for j in joined:
        if j.dispatched_at >= start:
            bins.setdefault(int((j.dispatched_at - start) // width), []).append(j)
    out = []
    for k in sorted(bins):
        s = stats(pairs(bins[k], target))
        if s["pairs"]:
            out.append({"from_s": round(k * width, 1), "pairs": s["pairs"], "coverage": s["coverage"]})
    return out


def windowed(joined: Sequence[Joined], target: str) -> dict[str, Any]:
    """The windows after the first trained bundle and the lowest coverage among those with enough pairs."""
    found = windows(joined, target)
    judged = [w for w in found if w["pairs"] >= MIN_WINDOW_PAIRS]
    low = min(judged, key=lambda w: w["coverage"], default=None)
    return {"width_s": WINDOW_S, "min_pairs": MIN_WINDOW_PAIRS, "judged": len(judged),
            "min_coverage": None if low is None else low["coverage"], "min_from_s": None if low is None else
            low["from_s"], "lowest": low, "windows": found}


def accuracy(joined: Sequence[Joined]) -> dict[str, dict[str, Any]]:
    """Per pool and target: coverage overall, by phase, by half of the run, by pod, per 10 s window after the first
    trained bundle; raw model coverage."""
    out: dict[str, dict[str, Any]] = {}
    for pool in sorted({j.pool for j in joined}):
        mine = [j for j in joined if j.pool == pool]
        half = len(mine) // 2
        out[pool] = {t: {**stats(pairs(mine, t)), "model": stats(pairs(mine, t, raw=True)),
                         "prior": stats(pairs([j for j in mine if j.phase == "prior"], t)),
                         "trained": stats(pairs([j for j in mine if j.phase == "trained"], t)),
                         "first_half": stats(pairs(mine[:half], t)), "second_half": stats(pairs(mine[half:], t)),
                         "windows": windowed(mine, t),
                         "by_pod": {pod: stats(pairs([j for j in mine if j.pod == pod], t))
                                    for pod in sorted({j.pod for j in mine})}}
                     for t in TARGETS}
    return out


def _dist(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"mean_ms": round(statistics.fmean(ordered), 2), "p50_ms": round(ordered[len(ordered) // 2], 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)], 2)}


def overhead(joined: Sequence[Joined], lag_ms: Sequence[float]) -> dict[str, Any]:
    """Client TTFT and its parts per pool (mean, p50, p90 in ms), and the load generator's loop lag."""
    out: dict[str, Any] = {}
    for pool in sorted({j.pool for j in joined}):
        split = [j.parts_ms for j in joined if j.pool == pool and j.parts_ms is not None]
        if not split:
            continue
        out[pool] = {"requests": len(split), "client_ttft": _dist([sum(p.values()) for p in split]),
                     "parts": {name: _dist([p[name] for p in split]) for name in PARTS}}
    out["load_generator_loop_lag"] = _dist(lag_ms) if lag_ms else {}
    return out
