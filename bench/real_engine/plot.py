"""The figure next to the JSON: TTFT CDF per policy (client-measured) and P99 TTFT / SLO attainment bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plot(path: Path, ttfts: Mapping[str, Sequence[float]], policies: Mapping[str, Mapping[str, Any]],
         title: str, slo_ttft_ms: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, values in ttfts.items():
        if values:
            xs = np.sort(np.asarray(values, dtype=np.float64))
            cdf.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=name)
    if slo_ttft_ms is not None:
        cdf.axvline(slo_ttft_ms, color="grey", linestyle="--", label=f"SLO {slo_ttft_ms:g} ms")
    cdf.set_xscale("log")
    cdf.set_xlabel("TTFT at the load generator (ms)")
    cdf.set_ylabel("CDF")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(fontsize=8)
    names = list(policies)
    p99 = [policies[n]["ttft_ms"]["p99"] or 0.0 for n in names]
    x = np.arange(len(names))
    bars.bar(x, p99, color="tab:blue")
    bars.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    bars.set_ylabel("P99 TTFT (ms)")
    attain = [policies[n].get("slo_attainment") for n in names]
    if any(a is not None for a in attain):
        twin = bars.twinx()
        twin.plot(x, [a if a is not None else np.nan for a in attain], "o-", color="tab:red")
        twin.set_ylabel("SLO attainment", color="tab:red")
        twin.set_ylim(0, 1.05)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
