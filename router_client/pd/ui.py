"""The status page's prefill/decode section, from ``/ui/data``'s ``pd`` (``PdMetrics.status``) — per P/D pool:
the decider's choices, the busiest (prefill, decode) pairs, recent prefill and KV hand-over times, prefill
failures. Numbers carry ``data-key`` = their path in ``/ui/data``."""

from __future__ import annotations

from typing import Any

from shared.charts import esc, num, table


def _times(pool: str, p: dict[str, Any]) -> str:
    rows = []
    for key, label in (("prefill_ms", "prefill leg (ms)"), ("kv_handover_ms", "KV hand-over to first token (ms)")):
        q = p[key]
        rows.append([esc(label)] + [num(q[k], f"pd.{pool}.{key}.{k}") for k in ("n", "p50", "p99")])
    return table(["", "requests", "p50", "p99"], rows, left=1)


def _pool(pool: str, p: dict[str, Any]) -> list[str]:
    choices = [[esc(c), num(n, f"pd.{pool}.choices.{c}")] for c, n in sorted(p["choices"].items())]
    pairs = [[esc(x["prefill"]), esc(x["decode"]), num(x["requests"], f"pd.{pool}.pairs.{i}.requests")]
             for i, x in enumerate(p["pairs"])]
    failures = [[esc(f["reason"]), esc(f["action"]), num(f["count"], f"pd.{pool}.prefill_failures.{i}.count")]
                for i, f in enumerate(p["prefill_failures"])]
    out = [f"<h2>Prefill/decode: pool {esc(pool)}</h2>", table(["decider choice", "requests"], choices, left=1),
           _times(pool, p), table(["prefill pod", "decode pod", "requests"], pairs, left=2)]
    if failures:
        out.append(table(["prefill failure", "router did", "requests"], failures, left=2))
    return out


def section(pd: dict[str, Any] | None) -> list[str]:
    return [html for pool, p in (pd or {}).items() for html in _pool(pool, p)]
