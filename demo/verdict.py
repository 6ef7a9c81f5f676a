"""The demo's verdict: did the served quantile cover router-measured latency as often as a calibrated one would?

Judged per pool and target on ``demo.truth.accuracy`` (prediction at dispatch vs router-measured latency):

- fewer than ``MIN_PAIRS`` pairs: reported, not judged;
- the covered count must lie in the two-sided 99 % binomial acceptance interval for its pair count
  (``demo.binomial``; p90 on 200 pairs: 84–95 %). Below it the predictions are too low, and the most specific
  explanation the numbers support follows; above it they are too loose — a router ranking pods by them cannot
  tell a fast pod from a slow one;
- no ``WINDOW_S`` window of at least ``MIN_WINDOW_PAIRS`` pairs after the first trained bundle below
  ``WINDOW_FLOOR`` (a dip).

A calibrated quantile passes the interval at least 99 % of the time per pool and target (~96 % for four).
"""

from __future__ import annotations

from typing import Any

from demo.binomial import LEVEL, acceptance_interval
from demo.truth import MIN_WINDOW_PAIRS, WINDOW_FLOOR, WINDOW_S

MIN_PAIRS = 30
"""Pool/targets with fewer pairs are reported, not judged."""


def _not_low(s: dict[str, Any], q: float) -> bool:
    """Enough pairs, and covered not below the acceptance interval (asked of a part of the run by ``_why``)."""
    n = s.get("pairs", 0)
    return n >= MIN_PAIRS and s["covered"] >= acceptance_interval(n, q)[0]


def _why(a: dict[str, Any], q: float) -> str:
    """The most specific explanation the numbers support for a coverage below the interval."""
    prior, trained, first, second, model = a["prior"], a["trained"], a["first_half"], a["second_half"], a["model"]
    if _not_low(model, q):
        return (f"the per-pod correction lowered it: the raw model covered {100 * model['coverage']:.0f} % of the "
                f"same requests")
    if prior.get("pairs") and _not_low(trained, q):
        return (f"the untrained prior bundle served the first {prior['pairs']} requests (coverage "
                f"{100 * prior['coverage']:.0f} %); with trained models it was {100 * trained['coverage']:.0f} %")
    if _not_low(second, q):
        return (f"the models were still learning: first half {100 * first['coverage']:.0f} %, second half "
                f"{100 * second['coverage']:.0f} %")
    worst = min(a["by_pod"].items(), key=lambda kv: kv[1].get("coverage", 1.0))
    tail = (f"latency in the second half ran above the predictions (measured mean {second['mean_measured_ms']:.1f} ms "
            f"vs predicted p90 mean {second['mean_predicted_ms']:.1f} ms)" if second.get("pairs") and
            second["mean_measured_ms"] > second["mean_predicted_ms"] else
            f"predictions too low on part of the traffic (MAPE {a['mape']:.2f})")
    return f"{tail}; lowest pod {worst[0].split('://')[-1]} {100 * worst[1].get('coverage', 0):.0f} %"


def _loose(a: dict[str, Any]) -> str:
    phase = "the untrained prior bundle served every request" if not a["trained"].get("pairs") else (
        "predictions well above the latency measured")
    return f"{phase} (mean predicted {a['mean_predicted_ms']:.1f} ms vs measured {a['mean_measured_ms']:.1f} ms)"


def _dip(a: dict[str, Any]) -> str | None:
    """Why a pool/target fails the windowed check (a window with enough pairs below ``WINDOW_FLOOR``), or None."""
    w = a.get("windows") or {}
    low = w.get("min_coverage")
    if low is None or low >= WINDOW_FLOOR:
        return None
    pairs = (w.get("lowest") or {}).get("pairs")
    counts = f" ({round(low * pairs)} of {pairs} pairs)" if pairs else ""
    return (f"coverage fell to {100 * low:.1f} %{counts} in the {w['width_s']:g} s window from +{w['min_from_s']:g} s "
            f"after the first trained bundle (floor {100 * WINDOW_FLOOR:.0f} % on windows of ≥ {w['min_pairs']} "
            f"pairs)")


def judge(a: dict[str, Any], q: float) -> dict[str, Any]:
    """One pool/target: its pairs, coverage, acceptance interval, whether judged and met, and each reason it missed
    (``too low`` / ``too loose`` / ``dip`` → why)."""
    n = a.get("pairs", 0)
    out: dict[str, Any] = {"pairs": n, "covered": a.get("covered", 0), "coverage": a.get("coverage"),
                           "interval": None, "interval_counts": None, "judged": n >= MIN_PAIRS, "met": None,
                           "misses": {}, "windows": {**(a.get("windows") or {}), "floor": WINDOW_FLOOR}}
    if n == 0:
        return out
    lo, hi = acceptance_interval(n, q)
    out.update(interval=[round(lo / n, 4), round(hi / n, 4)], interval_counts=[lo, hi])
    if n < MIN_PAIRS:
        return out
    misses = out["misses"]
    if a["covered"] < lo:
        misses["too low"] = _why(a, q)
    elif a["covered"] > hi:
        misses["too loose"] = _loose(a)
    dip = _dip(a)
    if dip is not None:
        misses["dip"] = dip
    out["met"] = not misses
    return out


def judgement_text(j: dict[str, Any]) -> str:
    """A pool/target's judgement (``judge``) in a few words: its interval and met / what missed."""
    if j.get("interval") is None:
        return "not judged (no pairs)"
    lo, hi = j["interval"]
    interval = f"{100 * LEVEL:g} % interval {100 * lo:.1f}–{100 * hi:.1f} %"
    if not j["judged"]:
        return f"{interval}: not judged (too few pairs)"
    return f"{interval}: " + ("met" if j["met"] else "MISSED (" + ", ".join(j["misses"]) + ")")


def _label(name: str, j: dict[str, Any]) -> str:
    lo, hi = j["interval"]
    return f"{name} {100 * j['coverage']:.1f} % of {j['pairs']} (interval {100 * lo:.1f}–{100 * hi:.1f} %)"


def _reasons(name: str, j: dict[str, Any]) -> str:
    lo, hi = j["interval"]
    bound = {"too low": f"too low (below {100 * lo:.1f} %)", "too loose": f"too loose (above {100 * hi:.1f} %)",
             "dip": "a dip"}
    return f"{name}: " + "; ".join(f"{bound[kind]}: {why}" for kind, why in j["misses"].items())


def verdict(acc: dict[str, dict[str, Any]], q: float) -> dict[str, Any]:
    """One line: did every pool and target with enough pairs cover within its acceptance interval, with no dip — and
    if not, which pool and target missed and why; with the per pool/target judgements (``judge``)."""
    judged = {pool: {t: judge(a, q) for t, a in targets.items()} for pool, targets in acc.items()}
    met: list[str] = []
    missed: list[str] = []
    notes: list[str] = []
    unjudged: list[str] = []
    for pool, targets in judged.items():
        for t, j in targets.items():
            name = f"{t.upper()} {pool}"
            if not j["judged"]:
                unjudged.append(f"{name} ({j['pairs']} pairs)")
            elif j["met"]:
                met.append(_label(name, j))
            else:
                missed.append(_label(name, j))
                notes.append(_reasons(name, j))
    target = (f"p{100 * q:g} coverage target (per pool and target: within the two-sided {100 * LEVEL:g} % binomial "
              f"interval for its pairs, and no {WINDOW_S:g} s window of ≥ {MIN_WINDOW_PAIRS} pairs below "
              f"{100 * WINDOW_FLOOR:.0f} % after the first trained bundle; router-measured latency vs the prediction "
              f"at dispatch)")
    if unjudged:
        notes.append(f"too few pairs to judge (< {MIN_PAIRS}) " + ", ".join(unjudged))
    tail = (" — " + "; ".join(notes)) if notes else ""
    if not met and not missed:
        line = f"No predictions to judge against the {target}" + (tail or ": every decision fell back") + "."
    elif not missed:
        line = f"Predictions MET their {target}: " + ", ".join(met) + tail + "."
    else:
        line = f"Predictions did NOT meet their {target}: " + ", ".join(missed) + tail + "."
    return {"met": bool(met) and not missed, "line": line, "met_by": met, "missed_by": missed,
            "not_judged": unjudged, "level": LEVEL, "min_pairs": MIN_PAIRS, "judged": judged}
