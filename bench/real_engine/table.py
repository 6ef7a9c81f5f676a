"""``python -m bench.real_engine.table F.json``: the results as a Markdown table (for RESULTS-real-engine.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

HEADER = ("| policy | requests | errors | shed | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p90 / p99 (ms) "
          "| router TTFT p99 (ms) | SLO attainment | served coverage TTFT / TPOT (all; after 60 s) "
          "| throughput (req/s) | predictor fallbacks |")


def _q(d: dict[str, Any] | None) -> str:
    if not d:
        return "–"
    return " / ".join("–" if d.get(k) is None else f"{d[k]:.0f}" for k in ("p50", "p90", "p99"))


def _cov(d: dict[str, Any] | None) -> str:
    if not d:
        return "null"
    return " / ".join("–" if d.get(k) is None else f"{d[k]:.2f}" for k in ("ttft", "tpot")) + f" (n={d['pairs']})"


def rows(doc: dict[str, Any]) -> list[str]:
    after = f"served_coverage_after_{doc['settings']['coverage_after_s']:g}s"
    out = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    for name, p in doc["policies"].items():
        slo = "–" if p["slo_attainment"] is None else f"{p['slo_attainment']:.3f}"
        cov = f"{_cov(p['served_coverage'])}; {_cov(p.get(after))}"
        fallbacks = "n/a (no predictor)" if p["served_coverage"] is None else str(p["fallback_decisions"])
        out.append(f"| {name} | {p['requests']} | {p['errors']} | {p['shed']} | {_q(p['ttft_ms'])} | "
                   f"{_q(p['tpot_ms'])} | {_q(p['router_ttft_ms']).split(' / ')[-1]} | {slo} | {cov} | "
                   f"{p['throughput_rps']} | {fallbacks} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.real_engine.table", description=(__doc__ or "").splitlines()[0])
    p.add_argument("results", type=Path, nargs="+", metavar="F.json", help="a bench.real_engine result file")
    for path in p.parse_args(argv).results:
        print("\n".join(rows(orjson.loads(path.read_bytes()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
