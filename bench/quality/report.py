"""Markdown tables of suite results (pandas): one table per family, one row per (rows, target, model)."""

from __future__ import annotations

from typing import Any

import pandas as pd

COLUMNS = ("coverage", "mape", "pinball_ratio", "pinball_vs_best")


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (family, rows, target, model); metric columns per quantile (e.g. ``cov 0.9``)."""
    keys = ["family", "rows", "target", "model"]
    metrics = [c for c in COLUMNS if c in df.columns]
    table = df.pivot_table(index=keys, columns="quantile", values=metrics, aggfunc="first")
    short = {"coverage": "cov", "mape": "MAPE", "pinball_ratio": "pin/oracle", "pinball_vs_best": "pin/best"}
    table.columns = [f"{short[m]} {q:g}" for m, q in table.columns]
    fit = df.groupby(keys)[["fit_wall_s", "fit_cpu_s", "loadavg"]].first()
    return table.join(fit).reset_index()


def _fmt(col: str, value: Any) -> str:
    if pd.isna(value):
        return "–"
    if col.startswith("MAPE"):
        return f"{100 * value:.1f} %"
    if col.startswith(("cov", "pin")):
        return f"{value:.3f}"
    if col.startswith("fit") or col == "loadavg":
        return f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(df: pd.DataFrame, machine: dict[str, Any]) -> str:
    lines = [f"machine: {machine}", ""]
    table = wide(df)
    for family, part in table.groupby("family", sort=False):
        part = part.drop(columns="family").dropna(axis=1, how="all")
        cols = list(part.columns)
        lines += [f"### {family}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, row in part.iterrows():
            lines.append("| " + " | ".join(_fmt(c, row[c]) for c in cols) + " |")
        lines.append("")
    return "\n".join(lines)


def targets(df: pd.DataFrame, model: str) -> pd.DataFrame:
    """Issue 13's targets per family for one model: 20k-row figures and whether 100k is no worse."""
    rows = []
    for (family, target), part in df[df["model"] == model].groupby(["family", "target"], sort=False):
        at = {(r["rows"], r["quantile"]): r for _, r in part.iterrows()}
        p90, p50, p99 = at.get((20_000, 0.9)), at.get((20_000, 0.5)), at.get((20_000, 0.99))
        big = at.get((100_000, 0.9))
        if p90 is None or p50 is None or p99 is None:
            continue
        metric = "mape" if pd.notna(p90.get("mape")) else "pinball_vs_best"
        rows.append({"family": family, "target": target, "cov 0.9": p90["coverage"],
                     "pin/oracle 0.9": p90.get("pinball_ratio"), "MAPE 0.9": p90.get("mape"),
                     "cov 0.5": p50["coverage"], "cov 0.99": p99["coverage"],
                     "100k no worse": None if big is None else bool(big[metric] <= p90[metric] * 1.02)})
    return pd.DataFrame(rows)
