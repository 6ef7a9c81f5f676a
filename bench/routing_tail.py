"""Who makes up predicted-latency's P99 TTFT, and could anything have avoided them (issue 23, item 3)?

``python -m bench.routing_tail --trace code --rate-scale 4 --out tail.json [--csv tail.csv] [--start S --duration D]``
replays one cell (8 × llama3-8b-a100, seed 0, as ``bench.bench_routing_matrix``) twice:

- **predicted-latency**, recording at every decision every candidate's router view (scraped waiting, in-flight,
  uncached prefill tokens in flight, prefix score, KV) and served predictions, the pick and why (``predicted``,
  ``explore``, ``anti_starvation``), and a *shadow forecast*: the request's exact TTFT on the chosen pod and on the
  best pod from the engines' state at that instant, ignoring later arrivals (the clairvoyant's computation,
  :mod:`sim.engine.fork`) — so each tail request is either avoidable at dispatch (another pod was predictably
  faster), unavoidable (every pod was already slow), or made slow afterwards (later arrivals);
- **clairvoyant**, recording the same view of the pod it chose.

It prints the P99 set's make-up next to all requests' and writes the per-request rows (``--csv``) and the summary.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_routing_matrix import PRESET, SLO_TTFT_MS, TRACES
from router_client.pipeline import DecisionCore, Outcome
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.cluster.policy import Completion, Decision, PodSnapshot, Policy, PolicyContext, RequestView
from sim.cluster.registry import default_registry
from sim.cluster.simulation import ClusterSimulation, ReplayItem, SimPod
from sim.engine import Engine
from sim.engine.config import EngineConfig
from sim.engine.fork import first_token_at, fork_engine
from sim.engine.sequence import Sequence as EngineSeq
from sim.paths import shared_data_dir
from sim.replay.items import build_items
from sim.workload.trace import load_trace


class _RecordingCore:
    """Stands in for the policy's DecisionCore: remembers the candidates and outcome of the last decision."""

    def __init__(self, core: DecisionCore) -> None:
        self.core = core
        self.last: Outcome | None = None

    def decide(self, pool: str, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Outcome:
        self.last = self.core.decide(pool, request, candidates)
        return self.last


class CopyCost:
    """A fork against a deep copy of the same engine state: time to make each, and the same first token."""

    def __init__(self) -> None:
        self.fork_ms: list[float] = []
        self.deepcopy_ms: list[float] = []
        self.running: list[int] = []
        self.cached_blocks: list[int] = []
        self.mismatches = 0

    def measure(self, engine: Engine, request: RequestView) -> None:
        t0 = time.perf_counter()
        fork = fork_engine(engine)
        t1 = time.perf_counter()
        memo: dict[int, object] = {id(s.payload): None for s in [*engine.waiting, *engine.running]}
        ref = copy.deepcopy(engine, memo)
        t2 = time.perf_counter()
        self.fork_ms.append((t1 - t0) * 1e3)
        self.deepcopy_ms.append((t2 - t1) * 1e3)
        self.running.append(len(engine.running) + len(engine.waiting))
        self.cached_blocks.append(engine.pool.num_cached)
        got = [first_token_at(e, EngineSeq(request.request_id, request.prompt_tokens, 1, request.block_hashes),
                              request.arrival_s) for e in (fork, ref)]
        self.mismatches += got[0] != got[1]

    def summary(self) -> dict[str, Any]:
        def q(v: list[float]) -> dict[str, float]:
            return {} if not v else {k: round(float(np.percentile(v, p)), 3) for k, p in (("p50", 50), ("p99", 99))}

        return {"samples": len(self.fork_ms), "fork_ms": q(self.fork_ms), "deepcopy_ms": q(self.deepcopy_ms),
                "sequences_on_pod": q([float(x) for x in self.running]),
                "cached_blocks": q([float(x) for x in self.cached_blocks]), "first_token_mismatches": self.mismatches}


class Recorder:
    """Wraps a replay policy; records every decision's view, predictions and (optionally) shadow forecasts."""

    def __init__(self, inner: Policy, forecast: bool, cost_every: int = 0) -> None:
        self.inner = inner
        self.cost_every = cost_every
        self.cost = CopyCost()
        self.name = inner.name
        self.forecast = forecast
        self.core: _RecordingCore | None = None
        if hasattr(inner, "core"):
            self.core = _RecordingCore(inner.core)
            inner.core = self.core  # type: ignore[attr-defined]
        self.pods: dict[str, SimPod] = {}
        self.rows: dict[str, dict[str, Any]] = {}

    def bind_pods(self, pods: Sequence[SimPod]) -> None:
        self.pods = {p.pod_id: p for p in pods}
        bind = getattr(self.inner, "bind_pods", None)
        if callable(bind):
            bind(pods)

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        decision = self.inner.choose(request, pods)
        if decision.pod_id is None:
            return decision
        snap = next(p for p in pods if p.pod_id == decision.pod_id)
        row: dict[str, Any] = {
            "request_id": request.request_id, "arrival_s": request.arrival_s, "prompt_tokens": request.prompt_tokens,
            "pod": snap.pod_id, "waiting": snap.metrics.num_requests_waiting, "in_flight": snap.in_flight,
            "prefill_in_flight": snap.prefill_tokens_in_flight, "prefix_score": round(snap.prefix_cache_score, 3),
            "kv": round(snap.metrics.kv_cache_usage, 3),
            "best_prefix_score": round(max(p.prefix_cache_score for p in pods), 3),
            "min_waiting": min(p.metrics.num_requests_waiting for p in pods),
            "min_prefill_in_flight": min(p.prefill_tokens_in_flight for p in pods),
            "predicted_ttft_ms": decision.predicted_ttft_ms,
        }
        if self.core is not None and self.core.last is not None:
            row.update(self._prediction_view(self.core.last))
        if self.forecast:
            row.update(self._forecasts(request, [p.pod_id for p in pods], snap.pod_id))
        self.rows[request.request_id] = row
        if self.cost_every and len(self.rows) % self.cost_every == 0:
            for pod in self.pods.values():
                self.cost.measure(pod.engine, request)
        return decision

    @staticmethod
    def _prediction_view(outcome: Outcome) -> dict[str, Any]:
        known = [c for c in outcome.candidates if c.predicted_ttft_ms is not None]
        if not known:
            return {"reason": outcome.reason}
        best = min(known, key=lambda c: c.predicted_ttft_ms or 0.0)
        return {"reason": outcome.reason, "min_predicted_ttft_ms": best.predicted_ttft_ms,
                "min_predicted_pod": best.pod,
                "predicted_by_pod": {c.pod: round(c.predicted_ttft_ms or 0.0, 1) for c in known}}

    def _forecasts(self, request: RequestView, pod_ids: list[str], chosen: str) -> dict[str, Any]:
        def at(pod_id: str, give_up: float = math.inf) -> float:
            seq = EngineSeq(request.request_id, request.prompt_tokens, 1, request.block_hashes)
            return first_token_at(fork_engine(self.pods[pod_id].engine), seq, request.arrival_s, give_up)

        mine = at(chosen)
        best_pod, best = chosen, mine
        for pod_id in pod_ids:
            if pod_id != chosen:
                t = at(pod_id, best)
                if t < best:
                    best_pod, best = pod_id, t
        ms = lambda t: round((t - request.arrival_s) * 1e3, 1)  # noqa: E731
        return {"forecast_chosen_ms": ms(mine), "forecast_best_ms": ms(best), "forecast_best_pod": best_pod}

    def on_complete(self, completion: Completion) -> None:
        self.inner.on_complete(completion)

    def status(self) -> dict[str, object]:
        status = getattr(self.inner, "status", None)
        return status() if callable(status) else {}


def replay(items: list[ReplayItem], cfg: ClusterConfig, policy: str, seed: int, forecast: bool,
           cost_every: int = 0) -> tuple[list[dict[str, Any]], Recorder]:
    ctx = PolicyContext(seed=seed, pods=cfg.pod_ids(), pod_classes={p.pod_id: p.pod_class for p in cfg.pods()})
    rec = Recorder(default_registry().build(policy, ctx), forecast, cost_every)
    result = ClusterSimulation(cfg, rec, seed=seed).run(items)
    rows = []
    for r in result.records:
        row = rec.rows.get(r.request_id, {"request_id": r.request_id})
        rows.append({**row, "ttft_ms": r.ttft_ms, "prefix_hit_fraction": r.prefix_hit_fraction})
    return rows, rec


def _med(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return None if not vals else round(float(np.median(vals)), 3)


def _share(rows: Sequence[dict[str, Any]], test: Any) -> float:
    return round(sum(1 for r in rows if test(r)) / max(len(rows), 1), 3)


def profile(rows: Sequence[dict[str, Any]], slo_ms: float) -> dict[str, Any]:
    """What a set of requests looked like at dispatch (medians and shares)."""
    out: dict[str, Any] = {"n": len(rows)}
    for key in ("prompt_tokens", "waiting", "in_flight", "prefill_in_flight", "prefix_score", "kv",
                "prefix_hit_fraction", "ttft_ms", "predicted_ttft_ms", "forecast_chosen_ms", "forecast_best_ms"):
        out[f"median_{key}"] = _med(rows, key)
    out["share_prompt_ge_4096"] = _share(rows, lambda r: r["prompt_tokens"] >= 4096)
    out["share_waiting_gt_min"] = _share(rows, lambda r: r.get("waiting", 0) > r.get("min_waiting", 0))
    out["share_prefill_in_flight_gt_min"] = _share(
        rows, lambda r: r.get("prefill_in_flight", 0) > r.get("min_prefill_in_flight", 0))
    out["pods"] = dict(sorted(Counter(r.get("pod") for r in rows).items()))
    if any("reason" in r for r in rows):
        out["reasons"] = dict(Counter(r.get("reason") for r in rows))
        out["share_not_min_predicted"] = _share(
            rows, lambda r: r.get("min_predicted_pod") is not None and r["min_predicted_pod"] != r["pod"])
        pairs = [(r["ttft_ms"], r["predicted_ttft_ms"]) for r in rows if r.get("predicted_ttft_ms") is not None]
        out["served_coverage_ttft"] = round(sum(a <= p for a, p in pairs) / len(pairs), 3) if pairs else None
        out["median_actual_over_predicted"] = (round(float(np.median([a / p for a, p in pairs if p > 0])), 3)
                                               if pairs else None)
    if any("forecast_chosen_ms" in r for r in rows):
        fc = [r for r in rows if "forecast_chosen_ms" in r]
        out["share_forecast_chosen_gt_slo"] = _share(fc, lambda r: r["forecast_chosen_ms"] > slo_ms)
        out["share_forecast_best_le_slo"] = _share(fc, lambda r: r["forecast_best_ms"] <= slo_ms)
        out["share_avoidable_at_dispatch"] = _share(
            fc, lambda r: r["forecast_chosen_ms"] > slo_ms >= r["forecast_best_ms"])
        out["share_unavoidable_at_dispatch"] = _share(fc, lambda r: r["forecast_best_ms"] > slo_ms)
        out["share_made_slow_later"] = _share(
            fc, lambda r: r["forecast_chosen_ms"] <= slo_ms < (r["ttft_ms"] or 0.0))
        out["median_actual_over_forecast"] = _med(
            [{"x": r["ttft_ms"] / r["forecast_chosen_ms"]} for r in fc if r["ttft_ms"] and r["forecast_chosen_ms"] > 0],
            "x")
    return out


def analyse(pl: list[dict[str, Any]], cv: list[dict[str, Any]], slo_ms: float) -> dict[str, Any]:
    done = [r for r in pl if r.get("ttft_ms") is not None]
    p99 = float(np.percentile([r["ttft_ms"] for r in done], 99))
    tail = [r for r in done if r["ttft_ms"] >= p99]
    cv_by_id = {r["request_id"]: r for r in cv}
    tail_in_cv = [cv_by_id[r["request_id"]] for r in tail if r["request_id"] in cv_by_id]
    cv_done = [r for r in cv if r.get("ttft_ms") is not None]
    cv_p99 = float(np.percentile([r["ttft_ms"] for r in cv_done], 99))
    for r in tail:
        # the model's answer for the pod the forecast said was best, next to its answer for the pod it took
        by_pod = r.get("predicted_by_pod") or {}
        r["predicted_for_forecast_best_ms"] = by_pod.get(r.get("forecast_best_pod"))
    return {
        "slo_ttft_ms": slo_ms, "pl_p99_ttft_ms": round(p99, 1), "cv_p99_ttft_ms": round(cv_p99, 1),
        "pl_all": profile(done, slo_ms), "pl_p99_set": profile(tail, slo_ms),
        "pl_p99_set_median_predicted_for_forecast_best_ms": _med(tail, "predicted_for_forecast_best_ms"),
        "same_requests_under_cv": profile(tail_in_cv, slo_ms),
        "cv_all": profile(cv_done, slo_ms),
        "cv_p99_set": profile([r for r in cv_done if r["ttft_ms"] >= cv_p99], slo_ms),
    }


CSV_FIELDS = ("request_id", "arrival_s", "prompt_tokens", "pod", "reason", "waiting", "in_flight", "prefill_in_flight",
              "prefix_score", "best_prefix_score", "kv", "min_waiting", "min_prefill_in_flight", "predicted_ttft_ms",
              "min_predicted_ttft_ms", "min_predicted_pod", "forecast_chosen_ms", "forecast_best_ms",
              "forecast_best_pod", "ttft_ms", "prefix_hit_fraction", "cv_pod", "cv_ttft_ms")


def write_csv(path: Path, pl: list[dict[str, Any]], cv: list[dict[str, Any]]) -> None:
    cv_by_id = {r["request_id"]: r for r in cv}
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_FIELDS), extrasaction="ignore")
        w.writeheader()
        for r in pl:
            other = cv_by_id.get(r["request_id"], {})
            w.writerow({**r, "cv_pod": other.get("pod"), "cv_ttft_ms": other.get("ttft_ms")})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", choices=sorted(TRACES), default="code")
    p.add_argument("--rate-scale", type=float, default=4.0)
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=float, default=0.0, help="first trace second replayed")
    p.add_argument("--duration", type=float, default=None, help="trace seconds replayed from --start")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--csv", type=Path, default=None, help="per-request rows of the predicted-latency run")
    p.add_argument("--policy", default="predicted-latency",
                   help="the policy whose tail is analysed (a pipeline policy: its DecisionCore is recorded)")
    p.add_argument("--policy-module", action="append", default=[],
                   help="import a module that registers more policies (e.g. bench.routing_variants)")
    p.add_argument("--cost-every", type=int, default=250,
                   help="every N decisions, time a fork against a deep copy of every pod (0: never)")
    args = p.parse_args(argv)
    for module in args.policy_module:
        default_registry().load_module(module)
    slo = SLO_TTFT_MS[args.trace]
    trace = load_trace(shared_data_dir() / TRACES[args.trace], args.rate_scale, args.limit, args.duration,
                       args.start)
    items = build_items(trace, args.seed, slo_ttft_ms=slo)
    cfg = ClusterConfig(pools=(PoolSpec("pod", args.pods, EngineConfig.from_preset(PRESET)),))
    pl, pl_rec = replay(items, cfg, args.policy, args.seed, forecast=True, cost_every=args.cost_every)
    print(f"{args.policy} done", file=sys.stderr, flush=True)
    cv, cv_rec = replay(items, cfg, "clairvoyant", args.seed, forecast=False)
    doc = {"settings": {"policy": args.policy, "trace": args.trace, "rate_scale": args.rate_scale, "pods": args.pods,
                        "seed": args.seed,
                        "start_s": args.start, "duration_s": args.duration, "limit": args.limit,
                        "requests": len(items)},
           **analyse(pl, cv, slo), "copy_cost": pl_rec.cost.summary(), "clairvoyant_status": cv_rec.status()}
    args.out.write_text(json.dumps(doc, indent=2))
    if args.csv is not None:
        write_csv(args.csv, pl, cv)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
