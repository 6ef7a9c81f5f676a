"""PNG of the compare table: GPU-hours and P99 TTFT per configuration and policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_compare(path: Path, rows: Sequence[dict[str, Any]], slo_ttft_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / len(policies)
    fig, (ax_gpu, ax_ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, policy in enumerate(policies):
        xs, hours, p99s, elastic = [], [], [], []
        for i, config in enumerate(configs):
            row = next((r for r in rows if r["config"] == config and r["policy"] == policy), None)
            if row is None:
                continue
            xs.append(i + (k - (len(policies) - 1) / 2) * width)
            hours.append(row["gpu_hours"])
            p99s.append(row["p99_ttft_ms"] or 0.0)
            elastic.append(row.get("elastic", {}).get("gpu_hours"))
        bars = ax_gpu.bar(xs, hours, width, label=policy)
        for x, h, e, row_gpus in zip(xs, hours, elastic, [r["gpus"] for r in rows if r["policy"] == policy],
                                     strict=False):
            ax_gpu.annotate(f"{row_gpus} GPUs", (x, h), ha="center", va="bottom", fontsize=7)
            if e is not None:
                ax_gpu.plot([x - width / 2, x + width / 2], [e, e], color="black", lw=1.5)
        ax_ttft.bar(xs, p99s, width, label=policy, color=bars.patches[0].get_facecolor())
    for ax in (ax_gpu, ax_ttft):
        ax.set_xticks(range(len(configs)), configs, fontsize=8)
    ax_gpu.set_ylabel("GPU-hours (static; black line: autoscaled)")
    ax_ttft.set_ylabel("P99 TTFT (ms)")
    ax_ttft.axhline(slo_ttft_ms, color="red", lw=1, ls="--", label=f"SLO {slo_ttft_ms:.0f} ms")
    ax_gpu.legend(fontsize=8)
    ax_ttft.legend(fontsize=8)
    fig.suptitle("Fewest GPUs meeting the TTFT SLO, conv trace (sim.capacity --compare)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
