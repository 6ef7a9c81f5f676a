"""Measured-profile mode: fitting step times to engine points, the profile file, the simulator run from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from sim.engine import ConfigError, Engine, Sequence
from sim.engine.hardware import ModelSpec
from sim.engine.measured import EngineShape, MeasuredProfile, load_profile, profile_from_json
from sim.engine.measured_fit import DecodePoint, PrefillPoint, fit_points, predicted_ms, prefill_steps
from sim.engine.openloop import OpenLoopRequest, run_open_loop
from sim.engine.stepfit import StepFit
from sim.replay.cli import build_parser, cluster_from_args
from sim.workload.blocks import coarse_block_hashes

BUDGET = 2048
TRUTH = StepFit(
    frontend_ms=12.0, overhead_ms=9.0, per_seq_ms=0.6, prefill_ms_per_qk=1.5e-4, decode_ms_per_kv_token=8e-4,
    knots=((1, 0.0), (16, 8.0), (32, 16.0), (64, 30.0), (128, 60.0), (256, 120.0), (512, 240.0), (1024, 500.0),
           (1536, 760.0), (2048, 1030.0)),
)
SHAPE = EngineShape("tiny", block_size=128, num_blocks=1024, max_num_seqs=128, max_num_batched_tokens=BUDGET,
                    max_model_len=4096, model=ModelSpec("tiny", 4, 512, 8, 4, 64, 1536, 8192, dtype_bytes=4))
PREFILL_GRID = [(n, 0) for n in (1, 16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4000)]
PREFILL_GRID += [(128, 1024), (512, 1024), (1024, 2048), (128, 3072), (512, 3072)]
DECODE_GRID = [(b, c) for c in (20.0, 1050.0, 3100.0) for b in (1, 2, 4, 8, 16, 32, 64, 128)]


def synthetic_points(fit: StepFit) -> tuple[list[PrefillPoint], list[DecodePoint]]:
    """Points exactly as ``fit`` predicts them (three identical samples each)."""
    pre = [PrefillPoint(n, c, (0.0,)) for n, c in PREFILL_GRID]
    dec = [DecodePoint(b, c, (0.0,), step_cv=0.04) for b, c in DECODE_GRID]
    ms = predicted_ms(fit, pre, dec, BUDGET)
    pre = [dataclasses.replace(p, ttft_ms=(m,) * 3) for p, m in zip(pre, ms, strict=False)]
    dec = [dataclasses.replace(d, tpot_ms=(m,) * 3) for d, m in zip(dec, ms[len(pre):], strict=True)]
    return pre, dec


@pytest.fixture
def profile() -> MeasuredProfile:
    pre, dec = synthetic_points(TRUTH)
    return MeasuredProfile(SHAPE, tuple(pre), tuple(dec), fit_points(pre, dec, BUDGET), {"cores": 2})


def test_prefill_beyond_the_budget_runs_in_chunks_with_growing_context() -> None:
    steps = prefill_steps(3000, 1024, BUDGET)
    assert [s.tokens for s in steps] == [2048, 952]
    assert steps[1].prefill_qk == pytest.approx(952 * (1024 + 2048 + 952 / 2))


def test_fit_recovers_the_coefficients_that_made_the_points(profile: MeasuredProfile) -> None:
    fit = profile.fit
    assert fit.rel_rmse < 1e-6
    for name in ("frontend_ms", "overhead_ms", "per_seq_ms", "prefill_ms_per_qk", "decode_ms_per_kv_token"):
        assert getattr(fit, name) == pytest.approx(getattr(TRUTH, name), rel=1e-4), name
    assert fit.token_ms_table(BUDGET)[777] == pytest.approx(TRUTH.token_ms_table(BUDGET)[777], rel=1e-4)
    assert fit.noise_std == pytest.approx(0.04)


def test_fit_pins_a_negative_coefficient_to_zero() -> None:
    pre, dec = synthetic_points(dataclasses.replace(TRUTH, frontend_ms=0.0))
    pre = [dataclasses.replace(p, ttft_ms=tuple(m - 0.5 for m in p.ttft_ms)) for p in pre]
    fit = fit_points(pre, dec, BUDGET)
    assert fit.frontend_ms == 0.0
    assert fit.rel_rmse < 0.05


def test_fit_needs_both_kinds_of_points() -> None:
    pre, _ = synthetic_points(TRUTH)
    with pytest.raises(ConfigError, match="both prefill and decode"):
        fit_points(pre, [], BUDGET)


def test_profile_round_trips_through_json_and_fits_when_the_fit_is_missing(
        profile: MeasuredProfile, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    profile.write(path)
    loaded = load_profile(path)
    assert loaded.engine == SHAPE and loaded.fit == profile.fit and loaded.prefill == profile.prefill
    raw = orjson.loads(path.read_bytes())
    raw.pop("fit")
    refit = profile_from_json(raw)
    assert refit.fit.per_seq_ms == pytest.approx(TRUTH.per_seq_ms, rel=1e-4)


def test_a_file_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"format": "something-else"}')
    with pytest.raises(ConfigError, match="not a measured engine profile"):
        load_profile(path)


def test_engine_config_comes_from_the_profile_alone(profile: MeasuredProfile) -> None:
    cfg = profile.engine_config(noise_std=0.0, seed=3, max_num_seqs=None)
    assert (cfg.block_size, cfg.num_gpu_blocks, cfg.kv_tokens) == (128, 1024, 131072)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_model_len) == (128, BUDGET, 4096)
    assert cfg.preset == "measured:tiny" and cfg.seed == 3
    with pytest.raises(ConfigError, match="unknown engine config keys"):
        profile.engine_config(gpu_count=2)


def test_step_times_are_the_fits_predictions(profile: MeasuredProfile) -> None:
    model = Engine(profile.engine_config(noise_std=0.0)).step_model
    pre = [PrefillPoint(700, 0, (1.0,))]
    dec = [DecodePoint(24, 900.0, (1.0,))]
    want_prefill, want_decode = predicted_ms(profile.fit, pre, dec, BUDGET)
    assert model.base_ms(700, 1, 700 * 350.0, 0) + profile.fit.frontend_ms == pytest.approx(want_prefill)
    assert model.base_ms(24, 24, 0.0, 24 * 900) == pytest.approx(want_decode)
    assert model.comm_ms[BUDGET] == 0.0


def test_open_loop_adds_the_frontend_to_ttft_but_not_to_tpot(profile: MeasuredProfile) -> None:
    cfg = profile.engine_config(noise_std=0.0)
    (res,) = run_open_loop(cfg, [OpenLoopRequest(1.0, 300, 10)], frontend_s=profile.fit.frontend_ms / 1e3)
    pre = predicted_ms(profile.fit, [PrefillPoint(300, 0, (1.0,))], [], BUDGET)[0]
    assert res.ttft_s * 1e3 == pytest.approx(pre)
    step = Engine(cfg).step_model.base_ms(1, 1, 0.0, 305)
    assert res.tpot_s is not None and res.tpot_s * 1e3 == pytest.approx(step, rel=0.02)
    assert res.e2e_s == pytest.approx(res.ttft_s + 9 * res.tpot_s)


def test_open_loop_hits_the_prefix_cache_by_block_hash(profile: MeasuredProfile) -> None:
    cfg = profile.engine_config(noise_std=0.0)
    shared = tuple(range(100, 106))
    reqs = [OpenLoopRequest(0.0, 800, 4, shared), OpenLoopRequest(5.0, 800, 4, shared)]
    first, second = run_open_loop(cfg, reqs)
    assert (first.hit_tokens, second.hit_tokens) == (0, 6 * 128)
    assert second.ttft_s < first.ttft_s


def test_coarse_blocks_are_named_by_their_last_fine_block() -> None:
    fine = tuple(range(20))
    assert coarse_block_hashes(fine, 16, 128) == (7, 15)
    assert coarse_block_hashes(fine[:7], 16, 128) == ()
    with pytest.raises(ConfigError):
        coarse_block_hashes(fine, 16, 100)


def test_replay_cli_runs_from_a_profile(profile: MeasuredProfile, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    profile.write(path)
    argv = ["--profile", str(path), "--pods", "2", "--max-model-len", "2048"]
    cfg = cluster_from_args(build_parser().parse_args(argv))
    (pool,) = cfg.pools
    assert pool.count == 2 and pool.engine.block_size == 128 and pool.engine.max_model_len == 2048
    assert pool.engine.measured == profile.fit
    with pytest.raises(ConfigError, match="--pools"):
        cluster_from_args(build_parser().parse_args(["--profile", str(path), "--pools", "a:1,b:1"]))


def test_engine_runs_every_request_to_completion(profile: MeasuredProfile) -> None:
    engine = Engine(profile.engine_config())
    for i in range(40):
        engine.add(Sequence(f"r{i}", 100 + 50 * i, 20), 0.0)
    engine.advance_until(float("inf"))
    assert engine.stats.finished == 40


DISTINCT_TRUTH = dataclasses.replace(TRUTH, decode_ms_per_kv_token=3e-4, decode_ms_per_unique_kv_token=1.4e-3)


def shared_and_distinct_points(fit: StepFit) -> tuple[list[PrefillPoint], list[DecodePoint]]:
    """Decode points of both kinds: a shared cached base (only its own 16 + decoded tokens distinct) and
    distinct contexts, as bench.fidelity.profile_measure takes them."""
    pre, dec = synthetic_points(fit)
    shared = [dataclasses.replace(d, unique_kv=(c - 30) + b * 30.0) for d, (b, c) in zip(dec, DECODE_GRID, strict=True)]
    distinct = [DecodePoint(b, c, (0.0,), unique_kv=b * c) for c in (1050.0, 3100.0) for b in (2, 8, 32)]
    ms = predicted_ms(fit, [], distinct, BUDGET)
    distinct = [dataclasses.replace(d, tpot_ms=(m,) * 3) for d, m in zip(distinct, ms, strict=True)]
    shared_ms = predicted_ms(fit, [], shared, BUDGET)
    shared = [dataclasses.replace(d, tpot_ms=(m,) * 3) for d, m in zip(shared, shared_ms, strict=True)]
    return pre, shared + distinct


def test_fit_separates_distinct_cached_tokens_from_shared_ones() -> None:
    pre, dec = shared_and_distinct_points(DISTINCT_TRUTH)
    fit = fit_points(pre, dec, BUDGET)
    assert fit.rel_rmse < 1e-6
    assert fit.decode_ms_per_kv_token == pytest.approx(3e-4, rel=1e-3)
    assert fit.decode_ms_per_unique_kv_token == pytest.approx(1.4e-3, rel=1e-3)
    # a shared base costs less than the same contexts read separately
    shared, distinct = predicted_ms(fit, [], [DecodePoint(32, 3100.0, (1.0,), unique_kv=3100 + 31 * 30.0),
                                              DecodePoint(32, 3100.0, (1.0,))], BUDGET)
    assert distinct > 1.5 * shared


def test_points_without_distinct_counts_fit_no_distinct_term(profile: MeasuredProfile) -> None:
    assert profile.fit.decode_ms_per_unique_kv_token == 0.0
    assert StepFit.from_json({k: v for k, v in profile.fit.to_json().items()
                              if k != "decode_ms_per_unique_kv_token"}) == profile.fit


def _decode_step_ms(profile: MeasuredProfile, shared: bool) -> float:
    """One pure-decode step of 16 sequences at ~2.1k context each, all prefilled first."""
    engine = Engine(profile.engine_config(noise_std=0.0))
    prefix = tuple(range(1000, 1016))  # 16 blocks of 128 tokens
    for i in range(16):
        hashes = prefix if shared else tuple(range(5000 + 20 * i, 5016 + 20 * i))
        engine.add(Sequence(f"r{i}", 2100, 50, hashes), 0.0)
    while True:
        res = engine.step()
        assert res is not None
        if all(s.num_output > 0 for s in engine.running) and len(engine.running) == 16:
            break
    res = engine.step()
    assert res is not None
    return (res.end - res.start) * 1e3


def test_the_simulator_reads_a_shared_prefix_once() -> None:
    """A decode step of 16 sequences sharing a cached 2k-token prefix against 16 of distinct prompts: with a
    distinct-token cost the shared batch steps faster, without one at the same speed."""
    pre, dec = shared_and_distinct_points(DISTINCT_TRUTH)
    measured = MeasuredProfile(SHAPE, tuple(pre), tuple(dec), fit_points(pre, dec, BUDGET))
    flat = dataclasses.replace(measured, fit=dataclasses.replace(measured.fit, decode_ms_per_unique_kv_token=0.0))
    assert _decode_step_ms(measured, shared=True) < 0.6 * _decode_step_ms(measured, shared=False)
    assert _decode_step_ms(flat, shared=True) == pytest.approx(_decode_step_ms(flat, shared=False), rel=0.01)
