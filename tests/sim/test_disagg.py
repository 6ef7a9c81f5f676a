"""Prefill/decode disaggregation in the replay (sim.cluster.disagg) and the P/D policies (sim.policies.pd)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from sim.cluster.config import ClusterConfig, PoolSpec, parse_pd
from sim.cluster.disagg import DisaggSimulation, make_simulation
from sim.cluster.policy import Decision, PodSnapshot, PolicyContext, RequestView, ScrapedMetrics
from sim.cluster.registry import PolicyRegistry
from sim.cluster.simulation import ClusterSimulation, ReplayItem
from sim.engine import EngineConfig, SimError
from sim.engine.kv_transfer import KVLink
from sim.policies.pd.roles import DeciderOptions
from sim.replay.__main__ import run as replay
from sim.scenario import Scenario
from sim.scenario.change import PodChange
from sim.scenario.schedule import ScenarioEvent
from tests.sim.test_pipeline_policies import items

LINK = KVLink(100.0, 1.0)
KV_8B = 131_072


def cluster(p: int = 1, d: int = 1, **engine: object) -> ClusterConfig:
    return ClusterConfig(parse_pd(f"{p}:{d}", "llama3-8b-a100", {"noise_std": 0.0, **engine}), kv_link=LINK)


def context(cfg: ClusterConfig, **options: str) -> PolicyContext:
    return PolicyContext(1, cfg.pod_ids(), options, pod_roles={p.pod_id: p.role for p in cfg.pods()})


def simulate(cfg: ClusterConfig, work: list[ReplayItem], policy: str = "pd-round-robin",
             scenario: Scenario | None = None, **options: str) -> ClusterSimulation:
    sim = make_simulation(cfg, PolicyRegistry().build(policy, context(cfg, **options)), seed=1, scenario=scenario)
    sim.run(work)
    return sim


def request(rid: str, t: float, prompt: int, output: int, key: int) -> ReplayItem:
    hashes = tuple(key * 100_000 + i for i in range(prompt // 16))
    return ReplayItem(RequestView(rid, t, prompt, None, 1024, f"k{key}", hashes), output)


def test_a_disaggregated_request_prefills_ships_its_kv_and_decodes() -> None:
    sim = simulate(cluster(), [request("r", 1.0, 1600, 20, key=1)], decider="always")
    assert isinstance(sim, DisaggSimulation)
    rec = sim.records[0]
    assert (rec.prefill_pod, rec.decode_pod, rec.pod_id, rec.disaggregated) == ("prefill-0", "decode-0",
                                                                               "decode-0", True)
    assert rec.kv_transfer_ms == pytest.approx(LINK.seconds(1600 * KV_8B) * 1e3)
    assert rec.kv_block_wait_ms == 0.0 and rec.output_tokens == 20
    prefill_row, decode_row = sim.samples
    assert (prefill_row["pod_type"], decode_row["pod_type"]) == ("prefill", "decode")
    assert prefill_row["actual_tpot_ms"] == 0.0 and decode_row["actual_tpot_ms"] == pytest.approx(rec.tpot_ms)
    step_ms = sim.pods[1].engine.step_model.step_seconds(1, 1, 0.0, 1600) * 1e3
    # TTFT = prefill leg (arrival → the prefill pod's token) + transfer + the decode pod's first step
    assert decode_row["actual_ttft_ms"] == pytest.approx(rec.kv_transfer_ms + step_ms)
    assert rec.ttft_ms == pytest.approx(prefill_row["actual_ttft_ms"] + decode_row["actual_ttft_ms"])
    assert sim.in_flight.requests == {"prefill-0": 0, "decode-0": 0}
    assert sim.in_flight.prefill_tokens == {"prefill-0": 0, "decode-0": 0}


def test_the_decider_keeps_cached_and_short_prompts_on_the_decode_pod() -> None:
    work = [request("long", 0.0, 1600, 5, key=1), request("again", 5.0, 1700, 5, key=1),
            request("short", 6.0, 300, 5, key=2)]
    sim = simulate(cluster(), work, pd_threshold="512")
    assert [r.disaggregated for r in sim.records] == [True, False, False]
    assert [r.prefill_pod for r in sim.records] == ["prefill-0", "decode-0", "decode-0"]
    assert sim.records[1].kv_transfer_ms is None
    assert [s["pod_type"] for s in sim.samples] == ["prefill", "decode", "", ""]


@pytest.mark.parametrize(("prompt", "prefix", "mode", "split"), [
    (1000, 0.0, "prefix", True), (1000, 0.6, "prefix", False), (400, 0.0, "prefix", False),
    (400, 0.0, "always", True), (4000, 0.0, "never", False)])
def test_decider(prompt: int, prefix: float, mode: str, split: bool) -> None:
    view = RequestView("r", 0.0, prompt, None, 1024, "k", ())
    pod = PodSnapshot("d", "decode", 8192, ScrapedMetrics(0, 0, 0.0, 0, 0.0), 0, 0, prefix, pod_type="decode")
    assert DeciderOptions.parse({"decider": mode, "pd_threshold": "512"}).disaggregate(view, pod) is split


def test_a_failed_decode_pod_releases_both_legs() -> None:
    fail = Scenario((ScenarioEvent(0, "decode-0", PodChange(fail=True), at_s=0.01),))
    sim = simulate(cluster(), [request("r", 0.0, 6000, 50, key=1)], scenario=fail, decider="always")
    assert sim.records[0].aborted == "pod_failed" and sim.records[0].ttft_ms is None
    assert sim.in_flight.requests == {"prefill-0": 0, "decode-0": 0}
    assert not sim.pods[0].engine.has_work() and not sim.pods[0].active


def test_prefill_pods_must_prefill_and_decode_pods_decode() -> None:
    class Backwards:
        name = "backwards"

        def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
            return Decision.route(pods[0].pod_id, prefill_pod_id=pods[-1].pod_id)

        def on_complete(self, completion: object) -> None:
            return None

    with pytest.raises(SimError, match="not a prefill-role candidate"):
        make_simulation(cluster(), Backwards()).run([request("r", 0.0, 100, 2, key=1)])
    aggregated = ClusterConfig((PoolSpec("pod", 2, EngineConfig.from_preset("llama3-8b-a100")),))
    with pytest.raises(SimError, match="without prefill pods"):
        make_simulation(aggregated, Backwards()).run([request("r", 0.0, 100, 2, key=1)])


@pytest.mark.timeout(180)
def test_pd_policies_serve_a_trace() -> None:
    cfg = cluster(2, 1)
    work = items(300, rate=6.0, sticky=False, seed=3)
    fast = {"retrain_interval_s": "10", "min_samples": "30", "rounds": "10"}
    for policy, opts in [("pd-load-prefix", {}), ("pd-predicted-latency", fast),
                         ("pd-predicted-latency", {**fast, "trainers": "split", "decider": "predicted"}),
                         ("pd-predicted-latency-slo", fast)]:
        sim = simulate(cfg, work, policy, **opts)
        done = [r for r in sim.records if r.ttft_ms is not None]
        assert len(done) == 300, policy
        assert {r.prefill_pod for r in done if r.disaggregated} == {"prefill-0", "prefill-1"}, policy
        assert all(r.decode_pod == "decode-0" for r in done), policy
        assert sum(sim.in_flight.requests.values()) == 0, policy
        if policy != "pd-load-prefix":
            assert sim.policy.models.retrains > 0 and any(r.predicted_ttft_ms for r in done), policy


def test_replay_cli_writes_the_pd_summary(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "pd.json"
    csv = tmp_path / "pd.csv"
    code = replay(["--pd", "2:1", "--link-gbps", "50", "--policy", "pd-round-robin,pd-load-prefix", "--limit", "80",
                   "--rate-scale", "4", "--quiet", "--out", str(out), "--requests-csv", str(csv)])
    assert code == 0
    doc = json.loads(out.read_text())["policies"]
    for summary in doc.values():
        assert set(summary["kv_transfer_ms"]) == {"p50", "p99"} and 0.0 < summary["disaggregated_share"] <= 1.0
        assert summary["kv_transfer_ms"]["p50"] > 0 and summary["completed"] == 80
        assert {"ttft_ms", "tpot_ms", "per_pod", "wall_s"} <= set(summary)
    header = (tmp_path / "pd-pd-round-robin.csv").read_text().splitlines()[0].split(",")
    assert {"prefill_pod", "decode_pod", "kv_transfer_ms", "disaggregated"} <= set(header)


def test_pd_flag_errors() -> None:
    with pytest.raises(SimError, match="P:D"):
        replay(["--pd", "3", "--quiet"])
    with pytest.raises(SimError, match="--pools"):
        replay(["--pd", "1:1", "--pools", "a:1", "--quiet"])
