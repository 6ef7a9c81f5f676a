"""PNG of ``--pd-compare`` documents: per trace, P99 TTFT and P99 TPOT against GPUs for every aggregated
configuration and every P/D split measured, the SLOs dashed, each side's answer circled."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

PANELS = (("p99_ttft_ms", "P99 TTFT (ms)", "ttft_ms"), ("p99_tpot_ms", "P99 TPOT (ms)", "tpot_ms"))


def plot_pd_compare(path: Path, docs: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """``docs``: (title, document) per trace, one row of panels each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(docs), len(PANELS), figsize=(11, 3.6 * len(docs)), squeeze=False)
    for row, (title, doc) in zip(axes, docs, strict=True):
        agg = [t for t in doc["trials"] if len(t["pods"]) == 1]
        pd = [t for t in doc["trials"] if len(t["pods"]) == 2]
        for ax, (key, name, slo_key) in zip(row, PANELS, strict=True):
            ax.plot([t["gpus"] for t in agg], [_capped(t[key]) for t in agg], "o-", color="C0", label="aggregated")
            ax.scatter([t["gpus"] for t in pd], [_capped(t[key]) for t in pd], color="C1", marker="s",
                       label="P/D split", zorder=3)
            for t in pd:
                ax.annotate(t["label"], (t["gpus"], _capped(t[key])), fontsize=6, xytext=(3, 2),
                            textcoords="offset points")
            for side, color in (("aggregated", "C0"), ("pd", "C1")):
                best = doc[side]
                if best is not None:
                    ax.scatter([best["gpus"]], [_capped(best[key])], s=180, facecolors="none", edgecolors=color,
                               linewidths=2, zorder=4)
            ax.axhline(doc["slo"][slo_key], color="red", ls="--", lw=1, label=f"SLO {doc['slo'][slo_key]:g} ms")
            ax.set_yscale("log")
            ax.set_xlabel("GPUs")
            ax.set_ylabel(name)
            ax.set_title(f"{title}: {name}", fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle("Aggregated vs P/D at equal GPUs (circled: fewest GPUs meeting both P99 SLOs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _capped(v: float | None) -> float:
    """An infinite percentile (requests never completed) plotted at 1e6 ms."""
    return 1e6 if v is None else v
