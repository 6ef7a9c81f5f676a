"""PNG of the compare table: the paper's three metrics (GPU-hours, P99 TTFT, preemptions per 1k requests)
per configuration and policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

PANELS = (("gpu_hours", "GPU-hours"), ("p99_ttft_ms", "P99 TTFT (ms)"), ("preemptions_per_1k", "preemptions per 1k"))


def plot_compare(path: Path, rows: Sequence[dict[str, Any]], slo_ttft_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / len(policies)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(14, 4.2))
    elastic_shown = False
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for k, policy in enumerate(policies):
            mine = [(i, r) for i, c in enumerate(configs) for r in rows if r["config"] == c and r["policy"] == policy]
            xs = [i + (k - (len(policies) - 1) / 2) * width for i, _ in mine]
            ax.bar(xs, [r[key] or 0.0 for _, r in mine], width, label=policy, color=f"C{k}")
            for x, (_, r) in zip(xs, mine, strict=True):
                if key == "gpu_hours":
                    ax.annotate(f"{r['gpus']} GPUs", (x, r[key]), ha="center", va="bottom", fontsize=7)
                    elastic = r.get("elastic", {}).get("gpu_hours")
                    if elastic is not None:
                        ax.plot([x - width / 2, x + width / 2], [elastic, elastic], color="black", lw=1.5)
                        elastic_shown = True
                elif key == "preemptions_per_1k":
                    ax.annotate(f"{r[key]:g}", (x, r[key]), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(configs)), configs, fontsize=8)
        ax.set_ylabel(label + (" (black line: autoscaled)" if key == "gpu_hours" and elastic_shown else ""))
    axes[1].axhline(slo_ttft_ms, color="red", lw=1, ls="--", label=f"SLO {slo_ttft_ms:.0f} ms")
    if max(r["preemptions_per_1k"] for r in rows) == 0:
        axes[2].set_ylim(0, 1)
        axes[2].text(0.5, 0.5, "no preemptions in any configuration", ha="center", transform=axes[2].transAxes,
                     fontsize=9)
    for ax in axes[:2]:
        ax.legend(fontsize=8)
    fig.suptitle("Fewest GPUs meeting the TTFT SLO (sim.capacity --compare)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
