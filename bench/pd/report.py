"""The P/D benchmark's variants, its targets per cell, the text table and the plot (``bench.pd.routing``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

BASELINE = "pd-load-prefix"
VARIANTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    (BASELINE, BASELINE, {}),
    ("pd-predicted-latency", "pd-predicted-latency", {"trainers": "shared"}),
    ("pd-predicted-latency/split", "pd-predicted-latency", {"trainers": "split"}),
    ("pd-predicted-latency-slo", "pd-predicted-latency-slo", {"trainers": "shared"}),
    ("pd-predicted-latency-slo/split", "pd-predicted-latency-slo", {"trainers": "split"}),
)
"""(name in the report, replay policy, its options)."""
P99_TARGET, P50_TARGET, TPOT_BAND, CPU_TARGET = 0.5, 0.85, 0.05, 2.0
CPU_PAIRS = (("pd-load-prefix", "aggregated/load-prefix"), ("pd-predicted-latency", "aggregated/predicted-latency"))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


def cell_targets(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per variant: P99 / p50 TTFT and p50 TPOT against ``pd-load-prefix`` with each target's verdict; the CPU-time
    ratio of each P/D replay to the aggregated replay of the same trace."""
    base = runs[BASELINE]
    out: dict[str, Any] = {"variants": {}, "cpu": {}}
    for name, _, _ in VARIANTS[1:]:
        r = runs[name]
        p99 = _ratio(r["ttft_ms"]["p99"], base["ttft_ms"]["p99"])
        p50 = _ratio(r["ttft_ms"]["p50"], base["ttft_ms"]["p50"])
        tpot = _ratio(r["tpot_ms"]["p50"], base["tpot_ms"]["p50"])
        out["variants"][name] = {
            "p99_ttft_ratio": p99, "p99_met": p99 is not None and p99 <= P99_TARGET,
            "p50_ttft_ratio": p50, "p50_met": p50 is not None and p50 <= P50_TARGET,
            "tpot_p50_ratio": tpot, "tpot_met": tpot is not None and round(abs(tpot - 1.0), 6) <= TPOT_BAND,
        }
    for pd, agg in CPU_PAIRS:
        ratio = _ratio(runs[pd]["cpu_s"], runs[agg]["cpu_s"])
        out["cpu"][pd] = {"pd_cpu_s": runs[pd]["cpu_s"], "aggregated": agg, "aggregated_cpu_s": runs[agg]["cpu_s"],
                          "ratio": ratio, "met": ratio is not None and ratio <= CPU_TARGET}
    return out


def _f(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def plot_cells(path: Path, cells: Sequence[dict[str, Any]]) -> None:
    """Per cell: each variant's P99 TTFT, p50 TTFT and p50 TPOT ÷ pd-load-prefix's, the targets dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cells if c.get("rate_scale") is not None]
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(4.2 * max(len(shown), 1), 3.8), squeeze=False)
    metrics = (("p99_ttft_ratio", "P99 TTFT"), ("p50_ttft_ratio", "p50 TTFT"), ("tpot_p50_ratio", "p50 TPOT"))
    names = [n for n, _, _ in VARIANTS[1:]]
    width = 0.8 / len(names)
    for ax, c in zip(axes[0], shown, strict=False):
        v = c["targets"]["variants"]
        for k, name in enumerate(names):
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(metrics))]
            ax.bar(xs, [v[name][m] or 0.0 for m, _ in metrics], width, label=name, color=f"C{k + 1}")
        for i, target in enumerate((P99_TARGET, P50_TARGET, 1.0)):
            ax.plot([i - 0.45, i + 0.45], [target, target], color="red", ls="--", lw=1)
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xticks(range(len(metrics)), [m for _, m in metrics], fontsize=8)
        ax.set_title(f"{c['cell']} ({c['pd']}, x{c['rate_scale']:g})", fontsize=8)
        ax.set_ylabel("÷ pd-load-prefix", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle("P/D routing at the highest load pd-load-prefix meets its P99 TTFT SLO (red: targets)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_cells(cells: Sequence[dict[str, Any]]) -> str:
    """The BENCHMARKS / RESULTS table: one row per (cell, variant), ratios against pd-load-prefix."""
    head = ("| cell | P:D | load | policy | P99 TTFT ms | p50 TTFT ms | p50 TPOT ms | P99 × | p50 × | TPOT × | "
            "disagg. share | KV transfer p50 / p99 ms | CPU s |")
    lines = [head, "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for c in cells:
        if c.get("rate_scale") is None:
            lines.append(f"| {c['cell']} | {c['pd']} | – | {c.get('note', '')} |||||||||")
            continue
        v = c["targets"]["variants"]
        for name, r in c["runs"].items():
            t = v.get(name, {})
            kv = r.get("kv_transfer_ms") or {}
            pods = c["pd"] if not name.startswith("aggregated") else f"{sum(int(x) for x in c['pd'].split(':'))} whole"
            lines.append(
                f"| {c['cell']} | {pods} "
                f"| ×{c['rate_scale']:g} | {name} | {_f(r['ttft_ms']['p99'])} | {_f(r['ttft_ms']['p50'])} "
                f"| {_f(r['tpot_ms']['p50'], 1)} | {_f(t.get('p99_ttft_ratio'), 2)} | {_f(t.get('p50_ttft_ratio'), 2)} "
                f"| {_f(t.get('tpot_p50_ratio'), 3)} | {_f(r.get('disaggregated_share'), 2)} "
                f"| {_f(kv.get('p50'), 1)} / {_f(kv.get('p99'), 1)} | {_f(r['cpu_s'], 1)} |")
    return "\n".join(lines)
