"""Judge the predictions on the quantity that is predicted, and explain the client's latency separately.

The router predicts, per pod, the p90 TTFT/TPOT that *it* will measure (upstream request sent → first
content chunk; inter-token time of the stream). The load generator sees more: its own event loop, the
loopback hop, the proxy's decision, the relay back. So coverage is computed on the router's records of
each request (``GET /ui/requests``: prediction at dispatch, router-measured latency), and the client's TTFT
is split into parts with the wall-clock stamps both sides recorded for the same request id:

    client TTFT = load generator send (request built, connection taken) + loopback + proxy accept (write,
                  accept, body read) + proxy decision + pod (router-measured TTFT) + relay → load generator read

Requests are also split by the bundle their pool's predictor served at dispatch (the untrained prior or a
trained model) and by half of the run, which is what usually explains a miss.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from demo.load import Record
from demo.watch import BundleSeen

TARGETS = ("ttft", "tpot")
PARTS = ("load generator send", "loopback + proxy accept", "proxy decision", "pod (router-measured TTFT)",
         "relay → load generator read")
MIN_PAIRS = 30
BAND = 0.04
"""The verdict's band: coverage over the run within the quantile ± this (p90: 0.86–0.94). Below it the predictions
are too low; above it they are loose — a router ranking pods by them cannot tell a fast pod from a slow one."""
WINDOW_S = 10.0
"""Width of the windows coverage is also judged in, from the first request a trained bundle served."""
MIN_WINDOW_PAIRS = 20
WINDOW_FLOOR = 0.75
"""A window with at least ``MIN_WINDOW_PAIRS`` pairs below this coverage fails the verdict (a dip)."""


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
    return {"pairs": len(sub), "coverage": round(sum(m <= p for p, m in sub) / len(sub), 4),
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


def _meets(s: dict[str, Any], q: float) -> bool:
    """Enough pairs, and coverage not below the band (the explanations of a miss ask this of a part of the run)."""
    return s.get("pairs", 0) >= MIN_PAIRS and s["coverage"] >= q - BAND


def in_band(s: dict[str, Any], q: float) -> bool:
    return _meets(s, q) and s["coverage"] <= q + BAND


SURE_ENOUGH = 0.9
"""Below this chance of a calibrated quantile landing in the band, the verdict says how many pairs it judged on."""


def band_chance(n: int, q: float, band: float = BAND) -> float:
    """The probability that a perfectly calibrated ``q``-quantile covers a share within ``q ± band`` of ``n``
    independent pairs (binomial; e.g. 0.57 on 39 pairs at p90, 0.98 on 300): how much a miss on ``n`` pairs says."""
    if n <= 0:
        return 0.0
    lo, hi = max(0, math.ceil((q - band) * n - 1e-9)), min(n, math.floor((q + band) * n + 1e-9))

    def log_pmf(k: int) -> float:
        return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(q)
                + (n - k) * math.log1p(-q))

    return min(1.0, sum(math.exp(log_pmf(k)) for k in range(lo, hi + 1)))


def _why(a: dict[str, Any], q: float) -> str:
    """The most specific explanation the numbers support for a coverage below target."""
    prior, trained, first, second, model = a["prior"], a["trained"], a["first_half"], a["second_half"], a["model"]
    if a["pairs"] < MIN_PAIRS:
        return f"only {a['pairs']} pairs, too few to judge"
    if _meets(model, q):
        return (f"the per-pod correction lowered it: the raw model covered {100 * model['coverage']:.0f} % of the "
                f"same requests")
    if prior.get("pairs") and _meets(trained, q):
        return (f"the untrained prior bundle served the first {prior['pairs']} requests (coverage "
                f"{100 * prior['coverage']:.0f} %); with trained models it was {100 * trained['coverage']:.0f} %")
    if _meets(second, q):
        return (f"the models were still learning: first half {100 * first['coverage']:.0f} %, second half "
                f"{100 * second['coverage']:.0f} %")
    worst = min(a["by_pod"].items(), key=lambda kv: kv[1].get("coverage", 1.0))
    tail = (f"latency in the second half ran above the predictions (measured mean {second['mean_measured_ms']:.1f} ms "
            f"vs predicted p90 mean {second['mean_predicted_ms']:.1f} ms)" if second.get("pairs") and
            second["mean_measured_ms"] > second["mean_predicted_ms"] else
            f"predictions too low on part of the traffic (MAPE {a['mape']:.2f})")
    return f"{tail}; lowest pod {worst[0].split('://')[-1]} {100 * worst[1].get('coverage', 0):.0f} %"


def _conservative(a: dict[str, Any], q: float) -> str:
    phase = "the untrained prior bundle served every request" if not a["trained"].get("pairs") else (
        "predictions well above the latency measured")
    return (f"{100 * a['coverage']:.0f} % is conservative (above {100 * (q + BAND):.0f} %): {phase} (mean "
            f"predicted {a['mean_predicted_ms']:.1f} ms vs measured {a['mean_measured_ms']:.1f} ms)")


def _dip(a: dict[str, Any]) -> str | None:
    """Why a pool/target fails the windowed check (a window with enough pairs below ``WINDOW_FLOOR``), or None."""
    w = a.get("windows") or {}
    low = w.get("min_coverage")
    if low is None or low >= WINDOW_FLOOR:
        return None
    return (f"coverage fell to {100 * low:.0f} % in the {w['width_s']:g} s window from +{w['min_from_s']:g} s "
            f"after the first trained bundle (floor {100 * WINDOW_FLOOR:.0f} % on windows of ≥ {w['min_pairs']} "
            f"pairs)")


def _thin(by_pairs: dict[int, float], q: float) -> str | None:
    """Which judged pair counts (→ their ``band_chance``) leave a calibrated quantile less than ``SURE_ENOUGH``
    chance of the band, or None."""
    counts = sorted(n for n, chance in by_pairs.items() if n >= MIN_PAIRS and chance < SURE_ENOUGH)
    if not counts:
        return None
    chances = " / ".join(f"{100 * by_pairs[n]:.0f} %" for n in counts)
    return (f"on {' / '.join(map(str, counts))} pairs a perfectly calibrated p{100 * q:g} lands in the band only "
            f"{chances} of the time")


def verdict(acc: dict[str, dict[str, Any]], q: float) -> dict[str, Any]:
    """One line: did router-measured latency stay within the predicted p90 as often as it should — over the run
    within ``q ± BAND`` and in every 10 s window after the first trained bundle not below ``WINDOW_FLOOR`` —, and if
    not why (too low, or loose: above the band)."""
    met: list[str] = []
    missed: list[str] = []
    notes: list[str] = []
    unjudged: list[str] = []
    chances: dict[str, float] = {}
    by_pairs: dict[int, float] = {}
    for pool, targets in acc.items():
        for t, a in targets.items():
            if not a.get("pairs"):
                continue
            label = f"{t.upper()} {pool} {100 * a['coverage']:.0f} %"
            dip = _dip(a)
            by_pairs.setdefault(a["pairs"], band_chance(a["pairs"], q))
            chances[f"{t} {pool}"] = round(by_pairs[a["pairs"]], 3)
            if a["pairs"] < MIN_PAIRS:
                unjudged.append(f"{t.upper()} {pool} ({a['pairs']} pairs)")
            elif in_band(a, q) and dip is None:
                met.append(label)
            else:
                missed.append(label)
                low = None if _meets(a, q) else _why(a, q)
                loose = _conservative(a, q) if a["coverage"] > q + BAND else None
                notes.insert(len(missed) - 1, f"{t.upper()} {pool}: " + "; ".join(r for r in (low, loose, dip) if r))
    target = (f"p{100 * q:g} coverage target ({100 * (q - BAND):.0f}–{100 * (q + BAND):.0f} %, router-measured latency "
              f"vs the prediction at dispatch)")
    if unjudged:
        notes.append("too few pairs to judge " + ", ".join(unjudged))
    thin = _thin(by_pairs, q)
    if thin:
        notes.append(thin)
    tail = (" — " + "; ".join(notes)) if notes else ""
    if not met and not missed:
        line = f"No predictions to judge against the {target}" + (tail or ": every decision fell back") + "."
    elif not missed:
        line = f"Predictions MET their {target}: " + ", ".join(met) + tail + "."
    else:
        line = f"Predictions did NOT meet their {target}: " + ", ".join(missed) + tail + "."
    return {"met": bool(met) and not missed, "line": line, "met_by": met, "missed_by": missed,
            "not_judged": unjudged, "band_chance": chances}
