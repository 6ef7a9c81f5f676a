"""Physics sanity of the engine: queueing, batching, context, KV pressure, prefix cache, limits."""

from __future__ import annotations

import dataclasses

import pytest

from sim.engine import Engine, EngineConfig, PromptTooLong, Sequence, StepTimeModel


def _ttft(cfg: EngineConfig, run_engine, arrivals: list[tuple[float, Sequence]], probe: Sequence) -> float:
    engine = Engine(cfg)
    run_engine(engine, [*arrivals, (0.001, probe)])
    assert probe.ttft is not None
    return probe.ttft


def test_ttft_grows_with_prompt_length(quiet_cfg, run_engine) -> None:
    ttfts = [_ttft(quiet_cfg, run_engine, [], Sequence("p", n, 4)) for n in (64, 512, 2048, 6000)]
    assert ttfts == sorted(ttfts) and ttfts[-1] > 5 * ttfts[0]


def test_ttft_grows_with_queued_prefill(quiet_cfg, run_engine) -> None:
    def probe_ttft(queued: int) -> float:
        ahead = [(0.0, Sequence(f"q{i}", 3000, 50)) for i in range(queued)]
        return _ttft(quiet_cfg, run_engine, ahead, Sequence("probe", 500, 4))

    ttfts = [probe_ttft(n) for n in (0, 2, 6, 12)]
    assert ttfts == sorted(ttfts) and ttfts[-1] > 3 * ttfts[0]


def _tpot(cfg: EngineConfig, run_engine, batch: int, prompt: int) -> float:
    engine = Engine(cfg)
    seqs = [Sequence(f"b{i}", prompt, 200) for i in range(batch)]
    run_engine(engine, [(0.0, s) for s in seqs])
    return sum(s.avg_tpot for s in seqs) / batch


def test_tpot_grows_with_batch_size(quiet_cfg, run_engine) -> None:
    tpots = [_tpot(quiet_cfg, run_engine, b, 200) for b in (1, 8, 64, 200)]
    assert tpots == sorted(tpots) and tpots[-1] > 1.5 * tpots[0]


def test_tpot_grows_with_context(quiet_cfg, run_engine) -> None:
    short, long_ = _tpot(quiet_cfg, run_engine, 16, 100), _tpot(quiet_cfg, run_engine, 16, 7000)
    assert long_ > 1.2 * short


def test_decode_step_near_roofline(quiet_cfg) -> None:
    """Single-sequence decode on A100: linear layers ~10 ms + overhead, above the 8 ms weight floor."""
    model = StepTimeModel(quiet_cfg)
    ms = model.base_ms(1, 1, 0.0, 1000)
    assert 8.0 < ms < 16.0


def test_linear_profile_matches_reference_points(quiet_cfg) -> None:
    a100 = StepTimeModel(quiet_cfg).linear_ms
    assert a100[512] == pytest.approx(34.6, rel=0.06)
    assert a100[2048] == pytest.approx(146, rel=0.05)
    h100_cfg = EngineConfig.from_preset("llama2-7b-h100", noise_std=0.0)
    h100 = StepTimeModel(h100_cfg).linear_ms
    assert h100[512] == pytest.approx(12.0, rel=0.1)
    assert h100[2048] == pytest.approx(40.0, rel=0.1)
    assert 5.0 < h100[32] < 6.5


def test_burst_preempts_when_kv_is_small(quiet_cfg, run_engine) -> None:
    def preemptions(blocks: int) -> int:
        cfg = dataclasses.replace(quiet_cfg, num_gpu_blocks_override=blocks)
        engine = Engine(cfg)
        run_engine(engine, [(0.0, Sequence(f"b{i}", 1000, 300)) for i in range(40)])
        return engine.stats.preemptions

    assert preemptions(25_000) == 0
    assert preemptions(1_200) > 0


def test_prefix_hit_cuts_ttft(quiet_cfg, run_engine) -> None:
    hashes = tuple(hash((42, b)) for b in range(4000 // 16))
    engine = Engine(quiet_cfg)
    cold, warm = Sequence("cold", 4000, 2, hashes), Sequence("warm", 4000, 2, hashes)
    run_engine(engine, [(0.0, cold), (5.0, warm)])
    assert warm.prefix_hit_fraction > 0.95
    assert warm.ttft is not None and cold.ttft is not None and warm.ttft < 0.3 * cold.ttft


def test_evicted_prefix_misses(small_cfg, run_engine) -> None:
    engine = Engine(small_cfg)
    hashes = tuple(hash((1, b)) for b in range(20))
    first = Sequence("a", 320, 2, hashes)
    filler = [Sequence(f"f{i}", 500, 2, tuple(hash((100 + i, b)) for b in range(31))) for i in range(4)]
    again = Sequence("b", 320, 2, hashes)
    run_engine(engine, [(0.0, first)] + [(1.0 + i, f) for i, f in enumerate(filler)] + [(9.0, again)])
    assert again.prefix_hit_fraction == 0.0
    assert engine.pool.evictions > 0


def test_too_long_prompt_is_rejected(small_cfg) -> None:
    engine = Engine(small_cfg)
    with pytest.raises(PromptTooLong, match="maximum context length is 512"):
        engine.add(Sequence("x", 600, 1), 0.0)
    with pytest.raises(PromptTooLong):
        engine.check_fits(400, 200)
    seq = Sequence("y", 500, 100)
    engine.add(seq, 0.0)
    assert seq.output_len == 12  # clipped to max_model_len


def test_config_validation() -> None:
    from sim.engine import ConfigError

    cfg = EngineConfig.from_preset("llama3-8b-a100")
    assert cfg.num_gpu_blocks == int((80 * 1024**3 * 0.9 - 16.06e9 - 2 * 1024**3) // (131072 * 16))
    lower = EngineConfig.from_preset("llama3-8b-a100", gpu_memory_utilization=0.5)
    assert lower.num_gpu_blocks < cfg.num_gpu_blocks
    with pytest.raises(ConfigError, match="fewer than max_model_len"):
        EngineConfig.from_preset("llama3-8b-a100", num_gpu_blocks_override=10, max_model_len=512)
    with pytest.raises(ConfigError, match="unknown engine config keys"):
        EngineConfig.from_preset("llama3-8b-a100", max_model_length=5)
    with pytest.raises(ConfigError, match="unknown preset"):
        EngineConfig.from_preset("gpt-5")
    with pytest.raises(ConfigError, match="no memory left"):
        EngineConfig.from_preset("llama3-8b-a100", gpu_memory_utilization=0.1)
