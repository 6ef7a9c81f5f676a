"""Per-request rows next to the JSON (``F-requests.csv``): the load generator's record joined with the router's."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.real_engine.load import tpot_ms
from demo.load import Record
from demo.workload import DemoRequest

COLUMNS = ("policy", "index", "arrival_s", "prompt_tokens", "output_tokens", "status", "error", "pod", "fallback",
           "ttft_ms", "tpot_ms", "router_ttft_ms", "router_tpot_ms", "predicted_ttft_ms", "predicted_tpot_ms",
           "dispatch_offset_s")


def rows(policy: str, requests: Sequence[DemoRequest], records: Sequence[Record],
         routed: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_id = {r["request_id"]: r for r in routed}
    t0 = min((float(r["dispatched_at"]) for r in routed), default=0.0)
    reqs = {r.index: r for r in requests}
    out = []
    for rec in records:
        req, router = reqs[rec.index], by_id.get(rec.request_id, {})
        out.append({"policy": policy, "index": rec.index, "arrival_s": round(req.arrival_s, 3),
                    "prompt_tokens": req.prompt_tokens, "output_tokens": req.output_tokens, "status": rec.status,
                    "error": rec.error, "pod": rec.pod, "fallback": router.get("fallback"),
                    "ttft_ms": rec.ttft_ms, "tpot_ms": tpot_ms(rec), "router_ttft_ms": router.get("ttft_ms"),
                    "router_tpot_ms": router.get("tpot_ms"), "predicted_ttft_ms": router.get("predicted_ttft_ms"),
                    "predicted_tpot_ms": router.get("predicted_tpot_ms"),
                    "dispatch_offset_s": round(float(router["dispatched_at"]) - t0, 3) if router else None})
    return out


def write(path: Path, table: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(table)


def csv_path(out: Path) -> Path:
    return out.with_name(out.stem + "-requests.csv")
