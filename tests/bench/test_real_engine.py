"""bench.real_engine without engines: argument checks, the policies as router configs, the workload's rate,
and the shape of the output document (from synthetic records)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.real_engine import __main__ as cli_main
from bench.real_engine import summary
from bench.real_engine.cli import parse_args, plot_path
from bench.real_engine.policies import POLICIES, router_overrides
from bench.real_engine.run import PolicyRun
from bench.real_engine.workload import build, scale_for_rate
from demo.load import Record
from router_client.config import SchedulerConfig
from router_client.scheduling.engine import Scheduler

BASE = ["--trace", "t.csv", "--duration", "90", "--out", "x/r.json"]
REPLAY_NAMES = {"round-robin", "least-queue", "load-prefix", "prefix-affinity", "least-kv", "predicted-latency"}


def test_parse_args_defaults_and_derived_paths() -> None:
    args = parse_args([*BASE, "--rps", "0.8", "--policy", "round-robin, predicted-latency", "--slo-ttft-ms", "2500"])
    assert args.policies == ["round-robin", "predicted-latency"]
    assert args.engines == 2 and args.rps == 0.8 and args.rate_scale is None and args.slo_ttft_ms == 2500
    assert args.workdir == Path("x/r-work") and plot_path(args.out) == Path("x/r.png")


@pytest.mark.parametrize("extra", [
    ["--policy", "round-robin"],                                    # neither --rate-scale nor --rps
    ["--rps", "1", "--rate-scale", "0.2", "--policy", "round-robin"],  # both
    ["--rps", "1", "--policy", "round-robin,fastest"],              # unknown policy
    ["--rps", "1", "--policy", "least-kv,least-kv"],                # twice
    ["--rps", "-1", "--policy", "least-kv"],                        # not positive
])
def test_parse_args_rejects(extra: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*BASE, *extra])


def test_every_replay_policy_is_a_valid_router_scheduler() -> None:
    assert set(POLICIES) == REPLAY_NAMES
    for policy in POLICIES.values():
        section = router_overrides(policy, seed=3)["scheduler"]
        assert section["seed"] == 3
        cfg = SchedulerConfig.model_validate(section)
        Scheduler.from_config(cfg)
        if not policy.predictor:
            assert cfg.scorers == cfg.fallback_scorers and cfg.exploration == 0 and cfg.min_share == 0
    assert POLICIES["predicted-latency"].scheduler is None and POLICIES["predicted-latency"].predictor


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    rows += [f"{i * 0.5},{100 + 5000 * (i == 3)},{10 + i}" for i in range(40)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_rps_puts_exactly_that_many_arrivals_in_the_run(tmp_path: Path) -> None:
    times = [i * 0.5 for i in range(40)]
    assert scale_for_rate(times, rps=2.0, duration_s=5.0) == pytest.approx(1.0)
    work = build(_trace(tmp_path), 5.0, None, 2.0, max_model_len=1024, vocab=512)
    assert len(work.requests) == 10 and work.offered_rps == pytest.approx(2.0)
    assert work.clipped == 1 and max(r.prompt_tokens + r.output_tokens for r in work.requests) <= 1023
    assert work.requests[0].body["ignore_eos"] is True and work.requests[0].route == "/v1/completions"


def _record(i: int, ttft: float | None, status: int = 200, error: str = "") -> Record:
    return Record(i, sent_at=float(i), request_id=f"demo-{i}", status=status, pod=f"p{i % 2}", ttft_ms=ttft,
                  e2e_ms=(ttft or 0) + 90.0, chunks=10, error=error)


def _routed(i: int, predicted: float | None, actual: float) -> dict[str, object]:
    return {"request_id": f"demo-{i}", "dispatched_at": 100.0 + i * 10, "fallback": predicted is None,
            "predicted_ttft_ms": predicted, "predicted_tpot_ms": predicted, "ttft_ms": actual, "tpot_ms": 10.0,
            "output_tokens": 10, "error": None}


def test_output_document_shape(tmp_path: Path) -> None:
    records = [_record(0, 100.0), _record(1, 3000.0), _record(2, None, 429), _record(3, None, 0, "ReadTimeout")]
    routed = [_routed(0, 200.0, 100.0), _routed(1, 200.0, 3000.0), _routed(2, None, 50.0)]
    args = argparse.Namespace(slo_ttft_ms=1000.0, coverage_after=10.0, engines=2, trace=Path("conv.csv"),
                              trace_start=0.0, duration=90.0, rps=0.5, max_model_len=4096, drain=60.0, seed=0,
                              retrain_interval=4.0, min_samples=20, predictor_timeout_ms=50.0,
                              policies=["predicted-latency", "round-robin"], no_prior_profile=False,
                              prior_profile=Path("p.json"), model=tmp_path)
    work = build(_trace(tmp_path), 5.0, 1.0, None, max_model_len=1024, vocab=512)
    spec = cli_main.engine_spec(argparse.Namespace(model=tmp_path, max_model_len=4096, python=None))
    runs = {"predicted-latency": PolicyRun(records, routed, {"pools": [{"name": "engine", "fallbacks": {}}]}),
            "round-robin": PolicyRun(records, [], {"pools": []})}
    doc = cli_main.result_doc(args, runs, spec, work)
    assert set(doc) == {"policies", "engines", "settings"}
    assert doc["settings"]["prior_profile"] == "p.json" and "prior_speed_factor" not in doc["settings"]
    p = doc["policies"]["predicted-latency"]
    for key in ("requests", "errors", "shed", "ttft_ms", "tpot_ms", "slo_attainment", "served_coverage",
                "throughput_rps", "router_ttft_ms", "router_tpot_ms", "clipped_prompts"):
        assert key in p
    assert (p["requests"], p["errors"], p["shed"]) == (4, 1, 1)
    assert set(p["ttft_ms"]) == set(p["tpot_ms"]) == {"p50", "p90", "p99"}
    assert p["tpot_ms"]["p50"] == pytest.approx(10.0)
    assert p["slo_attainment"] == 0.25                       # errors and sheds are misses
    assert p["served_coverage"] == {"ttft": 0.5, "tpot": 1.0, "pairs": 2}
    assert p["served_coverage_after_10s"] == {"ttft": 0.0, "tpot": 1.0, "pairs": 1}
    assert doc["policies"]["round-robin"]["served_coverage"] is None
    assert doc["engines"]["count"] == 2 and doc["engines"]["settings"]["block_size"] == 128
    cli_main.write(tmp_path / "r.json", doc, runs, work, 1000.0)
    assert (tmp_path / "r.png").stat().st_size > 0 and (tmp_path / "r-requests.csv").is_file()


def test_percentiles_of_nothing_are_null() -> None:
    assert summary.percentiles([]) == {"p50": None, "p90": None, "p99": None}
