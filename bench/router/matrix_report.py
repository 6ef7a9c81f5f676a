"""Verdicts, Markdown tables and the plot of the routing matrix (``bench.router.matrix``).

``python -m bench.router.matrix_report F.json`` prints the tables of a result file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common.results import flat

HEURISTICS = ("round-robin", "least-queue", "load-prefix", "prefix-affinity", "least-kv")
PL, CV, LQ = "predicted-latency", "clairvoyant", "least-queue"
# Issue 33's targets: PL's P99 <= least-queue's everywhere; <= 0.80x the best heuristic's in the cells named in
# RATIO_CELLS; >= half the clairvoyant's P99 gain over least-queue where that gain is >= 10 % of least-queue's;
# attainment >= the best heuristic's - 0.5 points; served p90 coverage >= 0.85 TTFT, >= 0.80 TPOT.
P99_RATIO_TARGET, SHARE_TARGET, SHARE_MIN_GAIN, ATTAINMENT_SLACK = 0.80, 0.5, 0.10, 0.005
COVERAGE_TARGETS = {"ttft": 0.85, "tpot": 0.80}
RATIO_CELLS = ("conv@6x", "conv@8x")


def _p99(m: Mapping[str, Any]) -> float:
    return float(m["ttft_ms"]["p99"])


def headroom_share(policies: Mapping[str, Mapping[str, Any]]) -> float | None:
    """(LQ_p99 − PL_p99) / (LQ_p99 − CV_p99): predicted-latency's share of the clairvoyant's improvement."""
    if not {PL, CV, LQ} <= set(policies):
        return None
    gap = _p99(policies[LQ]) - _p99(policies[CV])
    return None if gap <= 0 else (_p99(policies[LQ]) - _p99(policies[PL])) / gap


def _share_applies(policies: Mapping[str, Mapping[str, Any]]) -> bool:
    """The share target applies where the clairvoyant's gain over least-queue is >= 10 % of least-queue's P99."""
    lq = _p99(policies[LQ])
    return lq - _p99(policies[CV]) >= SHARE_MIN_GAIN * lq


def cell_verdict(policies: Mapping[str, Mapping[str, Any]], cell: str = "") -> dict[str, Any]:
    """The issue's targets for one (cell, seed): PL against least-queue, the best heuristic and the clairvoyant.
    A target that does not apply to the cell is None."""
    heur = {n: m for n, m in policies.items() if n in HEURISTICS}
    out: dict[str, Any] = {"cv_headroom_share": headroom_share(policies)}
    if heur:
        best_p99 = min(heur, key=lambda n: _p99(heur[n]))
        best_slo = max(heur, key=lambda n: heur[n]["slo_attainment"] or 0.0)
        out["best_heuristic_p99"] = {"policy": best_p99, "p99_ttft_ms": _p99(heur[best_p99])}
        out["best_heuristic_attainment"] = {"policy": best_slo, "slo_attainment": heur[best_slo]["slo_attainment"]}
    pl = policies.get(PL)
    if pl is None or not heur:
        return out
    cov = pl["served_coverage"] or {}
    ratio = _p99(pl) / out["best_heuristic_p99"]["p99_ttft_ms"]
    share = out["cv_headroom_share"]
    best_slo_share = out["best_heuristic_attainment"]["slo_attainment"] or 0.0
    share_applies = share is not None and _share_applies(policies)
    out["pl_p99_vs_best_heuristic"] = round(ratio, 4)
    out["targets"] = {
        "p99_le_least_queue": None if LQ not in policies else _p99(pl) <= _p99(policies[LQ]),
        "p99_le_0.80_best_heuristic": ratio <= P99_RATIO_TARGET if cell in RATIO_CELLS else None,
        "attainment_ge_best_heuristic_minus_0.5": (pl["slo_attainment"] or 0.0) >= best_slo_share - ATTAINMENT_SLACK,
        "served_coverage_ttft_ge_0.85": cov.get("ttft", 0.0) >= COVERAGE_TARGETS["ttft"],
        "served_coverage_tpot_ge_0.80": cov.get("tpot", 0.0) >= COVERAGE_TARGETS["tpot"],
        "cv_share_ge_0.5": share >= SHARE_TARGET if share_applies and share is not None else None,
    }
    return out


def _q(d: Mapping[str, float]) -> str:
    return " / ".join(f"{d[k]:,.0f}" if d[k] >= 10 else f"{d[k]:.1f}" for k in ("p50", "p90", "p99"))


def _cov(m: Mapping[str, Any]) -> str:
    c = m.get("served_coverage")
    return "–" if not c else " / ".join(f"{c[k]:.3f}" if k in c else "–" for k in ("ttft", "tpot"))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.2f} %"


def detail_rows(doc: Mapping[str, Any], seed: str) -> list[str]:
    out = ["| cell | policy | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p90 / p99 (ms) | SLO attainment "
           "| served coverage TTFT / TPOT | wall s |", "|---|---|--:|--:|--:|--:|--:|"]
    for key, cell in doc["cells"].items():
        run = cell["seeds"].get(seed)
        if run is None:
            continue
        for name, m in run["policies"].items():
            label = f"**{name}**" if name == PL else name
            out.append(f"| {key} | {label} | {_q(m['ttft_ms'])} | {_q(m['tpot_ms'])} | {_pct(m['slo_attainment'])} "
                       f"| {_cov(m)} | {m['wall_s']:.0f} |")
    return out


def _mark(ok: bool | None) -> str:
    return "" if ok is None else (" ✓" if ok else " ✗")


def summary_rows(doc: Mapping[str, Any]) -> list[str]:
    out = ["| cell | seed | best heuristic P99 (ms) | PL P99 | PL ÷ best (≤ 0.80: conv 6×, 8×) | LQ P99 (≥ PL) "
           "| CV P99 "
           "| PL share of CV headroom (≥ 0.5 where CV gains ≥ 10 %) "
           "| PL attainment vs best heuristic's (− 0.5 pt) | PL served coverage TTFT / TPOT (≥ 0.85 / 0.80) |",
           "|---|--:|---|--:|--:|--:|--:|--:|---|---|"]
    for key, cell in doc["cells"].items():
        for seed, run in cell["seeds"].items():
            pol = run["policies"]
            v = cell_verdict(pol, key)
            t = v.get("targets", {})
            best = v.get("best_heuristic_p99")
            best_txt = f"{best['p99_ttft_ms']:,.0f} ({best['policy']})" if best else "–"
            pl, cv, lq = pol.get(PL), pol.get(CV), pol.get(LQ)
            ratio = v.get("pl_p99_vs_best_heuristic")
            share = v["cv_headroom_share"]
            slo = v.get("best_heuristic_attainment")
            slo_txt = (f"{_pct(pl['slo_attainment'])} vs {_pct(slo['slo_attainment'])}"
                       f"{_mark(t.get('attainment_ge_best_heuristic_minus_0.5'))}") if pl and slo else "–"
            cov_ok = None if not t else t["served_coverage_ttft_ge_0.85"] and t["served_coverage_tpot_ge_0.80"]
            out.append(
                f"| {key} | {seed} | {best_txt} | {f'{_p99(pl):,.0f}' if pl else '–'} "
                f"| {'–' if ratio is None else f'{ratio:.3f}'}{_mark(t.get('p99_le_0.80_best_heuristic'))} "
                f"| {f'{_p99(lq):,.0f}' if lq else '–'}{_mark(t.get('p99_le_least_queue'))} "
                f"| {f'{_p99(cv):,.0f}' if cv else '–'} "
                f"| {'–' if share is None else f'{share:.2f}'}{_mark(t.get('cv_share_ge_0.5'))} | {slo_txt} "
                f"| {_cov(pl) if pl else '–'}{_mark(cov_ok)} |")
    return out


def table(doc: Mapping[str, Any]) -> str:
    seeds = doc["settings"]["seeds"]
    first = str(seeds[0])
    s = doc["settings"]
    windows = s.get("windows") or {}
    parts = [f"{t} trace s {w['start_s']:g}–{w['start_s'] + w['duration_s']:g}" for t, w in windows.items()]
    if s["duration_s"] is not None:
        parts.append(f"otherwise the first {s['duration_s']:g} trace s")
    if s["limit"] is not None:
        parts.append(f"at most {s['limit']} requests")
    span = ", ".join(parts) or "full traces"
    head = (f"{s['pods']} × {s['preset']}, seeds {', '.join(map(str, seeds))}, {span}; "
            f"wall {doc.get('wall_s', 0):.0f} s")
    return "\n".join([head, "", *summary_rows(doc), "", f"Seed {first}:", "", *detail_rows(doc, first)])


COLOURS = {PL: "tab:orange", CV: "tab:green"}


def clip_top(values: list[float]) -> float | None:
    """A y-limit that keeps one outlier bar (e.g. least-kv at 2-5x the rest) from flattening the others:
    1.3x the second largest when the largest is over 1.6x it, else None (no clipping)."""
    if len(values) < 2:
        return None
    ordered = sorted(values)
    return 1.3 * ordered[-2] if ordered[-1] > 1.6 * ordered[-2] > 0 else None


def plot(path: Path, doc: Mapping[str, Any]) -> None:
    """Per cell (first seed): P99 TTFT per policy as bars (an outlier clipped and labelled, see :func:`clip_top`),
    SLO attainment as a red line, the SLO dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = str(doc["settings"]["seeds"][0])
    cells = [(k, c) for k, c in doc["cells"].items() if seed in c["seeds"]]
    cols = min(3, len(cells))
    rows = math.ceil(len(cells) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, (key, cell) in zip(axes.flat, cells, strict=False):
        pol = cell["seeds"][seed]["policies"]
        names = list(pol)
        x = list(range(len(names)))
        values = [_p99(pol[n]) for n in names]
        ax.bar(x, values, color=[COLOURS.get(n, "tab:blue") for n in names])
        top = clip_top(values)
        if top is not None:
            ax.set_ylim(0, top)
            for i, v in enumerate(values):
                if v > top:
                    ax.text(i, top * 0.97, f"{v:,.0f}↑", ha="center", va="top", fontsize=7, rotation=90, color="white")
        ax.axhline(cell["slo_ttft_ms"], color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("P99 TTFT (ms)")
        ax.set_title(f"{key} (SLO {cell['slo_ttft_ms']:g} ms)", fontsize=10)
        twin = ax.twinx()
        twin.plot(x, [(pol[n]["slo_attainment"] or 0.0) * 100 for n in names], "o-", color="tab:red", markersize=4)
        twin.set_ylabel("SLO attainment (%)", color="tab:red", fontsize=8)
    for ax in list(axes.flat)[len(cells):]:
        ax.set_visible(False)
    fig.suptitle(f"Routing matrix: {doc['settings']['pods']} × {doc['settings']['preset']}, seed {seed} "
                 "(orange: predicted-latency, green: clairvoyant)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.router.matrix_report", description=(__doc__ or "").splitlines()[0])
    p.add_argument("results", type=Path, nargs="+", metavar="F.json", help="a bench.router.matrix result file")
    for name in p.parse_args(argv).results:
        print(table(flat(json.loads(name.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
