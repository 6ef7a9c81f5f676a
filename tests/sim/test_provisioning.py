"""Context-dependent provisioning: tensor parallelism, the 70B preset, worst-case vs aggressive."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim.calibrate import REFERENCE_70B_TP, tp_rows
from sim.cluster import single_pool
from sim.engine import ConfigError, Engine, EngineConfig, Sequence, StepTimeModel
from sim.engine.config import FILE_KEYS
from sim.engine.hardware import GIB
from sim.replay import build_items, run_policy
from sim.workload import load_trace

TP4 = "llama3-70b-a100-tp4"


def test_70b_preset_kv_follows_the_formula() -> None:
    cfg = EngineConfig.from_preset(TP4)
    assert cfg.model.kv_bytes_per_token == 320 * 1024  # 80 x 8 x 128 x 2 x 2
    assert cfg.model.weight_bytes == pytest.approx(141.1e9, rel=1e-3)
    per_gpu = 80 * GIB * 0.9 - cfg.model.weight_bytes / 4 - 2 * GIB
    assert cfg.num_gpu_blocks == int(4 * per_gpu // (16 * 320 * 1024))
    assert 440_000 < cfg.kv_tokens < 500_000  # data README: ~450k with decimal GB and no reserve
    half = EngineConfig.from_preset(TP4, gpu_memory_utilization=0.6)
    assert half.num_gpu_blocks < cfg.num_gpu_blocks
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (256, 2048)  # vLLM's A100 defaults


def test_tp_table_matches_the_data_readme() -> None:
    rows = [r for r in tp_rows() if r["ref_linear_ms"] is not None]
    assert {r["tp"] for r in rows} == set(REFERENCE_70B_TP) and len(rows) == 9
    for r in rows:
        assert r["linear_ms"] == pytest.approx(r["ref_linear_ms"], rel=0.03), r


def test_tensor_parallel_step_adds_all_reduce_and_splits_attention() -> None:
    tp4 = StepTimeModel(EngineConfig.from_preset(TP4, noise_std=0.0))
    tp8 = StepTimeModel(EngineConfig.from_preset(TP4, tensor_parallel_size=8, noise_std=0.0))
    assert tp4.comm_ms[1] > 0 and tp4.comm_ms[2048] > tp4.comm_ms[1]
    assert tp8.linear_ms[2048] < tp4.linear_ms[2048]
    assert tp8.coef.decode_ms_per_kv_token == pytest.approx(tp4.coef.decode_ms_per_kv_token / 2)
    assert tp8.coef.prefill_ms_per_qk == pytest.approx(tp4.coef.prefill_ms_per_qk / 2)
    assert tp4.base_ms(1, 1, 0.0, 1) == pytest.approx(
        tp4.coef.overhead_ms + tp4.coef.per_seq_ms + tp4.linear_ms[1] + tp4.comm_ms[1]
        + tp4.coef.decode_ms_per_kv_token)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"tensor_parallel_size": 3}, "must divide the model's 64 heads"),
    ({"tensor_parallel_size": 1}, "no memory left for the KV cache"),  # 141 GB of weights on one GPU
    ({"provisioning": "yolo"}, "provisioning must be one of"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in"),
])
def test_bad_provisioning_configs(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_preset(TP4, **overrides)


def test_tp_needs_profiles() -> None:
    with pytest.raises(ConfigError, match=r"no rows for tensor_parallel_size=16 \(has: 1, 2, 4, 8\)"):
        StepTimeModel(EngineConfig.from_preset("llama3-8b-a100", tensor_parallel_size=16))
    tp2 = EngineConfig.from_preset("llama3-8b-a100", tensor_parallel_size=2)
    assert tp2.num_gpu_blocks > 2 * EngineConfig.from_preset("llama3-8b-a100").num_gpu_blocks
    assert StepTimeModel(tp2).comm_ms[512] > 0
    with pytest.raises(ConfigError, match="no all-reduce profile for H100"):
        EngineConfig.from_preset("llama3-8b-h100", tensor_parallel_size=2)


def test_worst_case_caps_max_num_seqs_by_max_model_len() -> None:
    cfg = EngineConfig.from_preset(TP4, provisioning="worst-case")
    assert cfg.max_num_seqs == cfg.num_gpu_blocks // (8192 // 16) == 59
    long = EngineConfig.from_preset(TP4, provisioning="worst-case", max_model_len=32768)
    assert long.max_num_seqs == cfg.num_gpu_blocks // 2048 == 14
    short = EngineConfig.from_preset(TP4, provisioning="worst-case", max_model_len=1024)
    assert short.max_num_seqs == 256  # the cap only lowers
    assert EngineConfig.from_preset(TP4, max_model_len=32768).max_num_seqs == 256  # aggressive keeps it


def _hammer(provisioning: str) -> Engine:
    cfg = EngineConfig.from_preset("llama3-8b-a100", num_gpu_blocks_override=2000, max_model_len=4096,
                                   provisioning=provisioning, noise_std=0.0)
    engine = Engine(cfg)
    seqs = [Sequence(f"h{i}", 1500 + 37 * i, 2600) for i in range(60)]
    for s in seqs:
        engine.add(s, 0.0)
    engine.advance_until(math.inf)
    assert all(s.finished for s in seqs)
    return engine


def test_worst_case_never_preempts_aggressive_does() -> None:
    worst = _hammer("worst-case")
    assert worst.cfg.max_num_seqs == 2000 // 256 == 7
    assert worst.stats.preemptions == 0
    assert _hammer("aggressive").stats.preemptions > 0


def test_worst_case_70b_pool_under_replay_load_has_no_preemptions(shared_data: Path) -> None:
    items = build_items(load_trace(shared_data / "azure_llm_2023_conv.csv", rate_scale=4.0, limit=600), seed=4)
    results = {}
    for rule in ("worst-case", "aggressive"):
        cfg = EngineConfig.from_preset(TP4, gpu_memory_utilization=0.6, provisioning=rule)
        results[rule], _ = run_policy(single_pool(2, cfg), items, "round-robin")
    assert results["worst-case"]["preemptions"] == 0 and results["worst-case"]["completed"] == 600
    assert results["aggressive"]["preemptions"] > 0


def test_file_keys_cover_every_scalar_engine_field() -> None:
    import dataclasses

    scalar = {f.name for f in dataclasses.fields(EngineConfig)} - {"preset", "model", "gpu", "profile", "measured"}
    assert set(FILE_KEYS) == scalar
