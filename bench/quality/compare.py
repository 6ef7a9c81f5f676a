"""``python -m bench.quality.compare NEW.json OLD.json``: two accuracy-suite runs side by side (p90 pinball ratio new ÷
old, coverage and MAPE vs truth at every quantile), per family × target × rows; the issue-33 verdict per family:
p90 pinball within +2 % of the old run's and coverage in band (p50 0.45–0.55, p90 0.88–0.92, p99 ≥ 0.97)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common.results import figures

PINBALL_SLACK = 1.02
BANDS = {0.5: (0.45, 0.55), 0.9: (0.88, 0.92), 0.99: (0.97, 1.0)}


def index(path: Path, model: str) -> dict[tuple[str, str, int, float], Mapping[str, Any]]:
    records = figures(json.loads(path.read_text()))["records"]
    return {(r["family"], r["target"], r["rows"], r["quantile"]): r for r in records if r["model"] == model}


def rows(new: Mapping[tuple[str, str, int, float], Mapping[str, Any]],
         old: Mapping[tuple[str, str, int, float], Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for (family, target, n, q), r in sorted(new.items()):
        if q != 0.9 or (family, target, n, q) not in old:
            continue
        o = old[(family, target, n, q)]
        covs = {k: new[(family, target, n, k)]["coverage"] for k in BANDS if (family, target, n, k) in new}
        out.append({"family": family, "target": target, "rows": n, "pinball_new": r["pinball"],
                    "pinball_old": o["pinball"], "ratio": r["pinball"] / o["pinball"], "mape_new": r.get("mape"),
                    "mape_old": o.get("mape"), "coverage": covs, "candidate": r.get("candidate", ""),
                    "in_band": all(BANDS[k][0] <= v <= BANDS[k][1] for k, v in covs.items())})
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| family | target | rows | p90 pinball new / old | ÷ old | MAPE p90 new / old | coverage p50 / p90 / p99 "
             "| chosen | verdict |", "|---|---|--:|--:|--:|--:|---|---|---|"]
    for r in table:
        mape = "–" if r["mape_new"] is None else f"{100 * r['mape_new']:.1f} % / {100 * r['mape_old']:.1f} %"
        cov = " / ".join(f"{r['coverage'].get(q, float('nan')):.3f}" for q in BANDS)
        ok = r["ratio"] <= PINBALL_SLACK and r["in_band"]
        lines.append(f"| {r['family']} | {r['target']} | {r['rows']:,} | {r['pinball_new']:.3f} / "
                     f"{r['pinball_old']:.3f} | {r['ratio']:.3f} | {mape} | {cov} | {r['candidate']} | "
                     f"{'met' if ok else 'not met'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.quality.compare", description=(__doc__ or "").splitlines()[0])
    p.add_argument("new", type=Path)
    p.add_argument("old", type=Path)
    p.add_argument("--model", default="trainer")
    p.add_argument("--old-model", default="trainer")
    args = p.parse_args(argv)
    print(markdown(rows(index(args.new, args.model), index(args.old, args.old_model))))


if __name__ == "__main__":
    main()
