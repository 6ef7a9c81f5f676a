"""KV transfer into a decode engine (sim.engine.kv_transfer): link time, waiting for blocks, first token."""

from __future__ import annotations

import math

import pytest

from sim.engine import Engine, EngineConfig, Sequence
from sim.engine.kv_transfer import IngressLink, KVLink, RemoteKV

KV_8B = 131_072
"""Llama-3-8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes."""


def decode_engine(link: KVLink, **overrides: object) -> Engine:
    engine = Engine(EngineConfig.from_preset("llama3-8b-a100", noise_std=0.0, **overrides))
    engine.kv_ingress = IngressLink(link)
    return engine


def hashes(tag: int, prompt: int) -> tuple[int, ...]:
    return tuple(tag * 100_000 + i for i in range(prompt // 16))


@pytest.mark.parametrize(("gbps", "latency_ms", "lanes"), [(100.0, 1.0, 1), (400.0, 0.0, 1), (25.0, 5.0, 4)])
def test_transfer_time_is_bytes_over_bandwidth_plus_latency(gbps: float, latency_ms: float, lanes: int) -> None:
    link = KVLink(gbps, latency_ms)
    nbytes = 1600 * KV_8B
    assert link.seconds(nbytes, lanes) == pytest.approx(nbytes * 8 / (gbps * 1e9 * lanes) + latency_ms / 1e3)
    engine = decode_engine(link)
    remote = RemoteKV(lanes=lanes)
    seq = Sequence("r", 1600, 4, hashes(1, 1600))
    engine.add_remote(seq, 2.0, remote)
    engine.advance_until(math.inf)
    assert (remote.tokens, remote.nbytes) == (1600, nbytes)
    assert remote.allocated_s == 2.0 and remote.block_wait_s == 0.0
    assert remote.transfer_s == pytest.approx(link.seconds(nbytes, lanes))
    first_step = engine.step_model.step_seconds(1, 1, 0.0, 1600)
    assert seq.first_token_time == pytest.approx(remote.ready_s + first_step)
    assert seq.num_output == 4 and engine.pool.num_used == 0


def test_the_decode_pods_cached_prefix_is_not_sent() -> None:
    engine = decode_engine(KVLink(100.0, 1.0))
    engine.add(Sequence("warm", 800, 1, hashes(1, 800)), 0.0)
    engine.advance_until(math.inf)
    remote = RemoteKV()
    engine.add_remote(Sequence("r", 1600, 2, hashes(1, 1600)), engine.clock, remote)
    engine.advance_until(math.inf)
    assert remote.tokens == 1600 - 800


def test_without_free_blocks_the_transfer_waits_for_them() -> None:
    # 64 blocks; two running requests grow to 32 blocks each (480-token prompts + 30 tokens): the pool is full
    engine = decode_engine(KVLink(100.0, 1.0), num_gpu_blocks_override=64, max_model_len=1024)
    blockers = [Sequence(f"b{i}", 480, 30, hashes(10 + i, 480)) for i in range(2)]
    for seq in blockers:
        engine.add(seq, 0.0)
    engine.advance_until(0.05)
    remote = RemoteKV()
    seq = Sequence("r", 400, 3, hashes(3, 400))
    engine.add_remote(seq, 0.05, remote)
    engine.advance_until(0.06)
    assert remote.allocated_s is None and engine.num_waiting == 1
    engine.advance_until(math.inf)
    freed = min(b.finish_time or math.inf for b in blockers)
    assert remote.allocated_s == pytest.approx(freed) and remote.block_wait_s == pytest.approx(freed - 0.05)
    assert seq.first_token_time is not None and seq.first_token_time > (remote.ready_s or math.inf) - 1e-12
    engine.pool.check()


def test_one_ingress_link_moves_one_transfer_at_a_time() -> None:
    link = KVLink(100.0, 2.0)
    engine = decode_engine(link)
    remotes = [RemoteKV(), RemoteKV()]
    for i, remote in enumerate(remotes):
        engine.add_remote(Sequence(f"r{i}", 1600, 2, hashes(i + 1, 1600)), 0.0, remote)
    engine.advance_until(math.inf)
    busy = link.busy_s(1600 * KV_8B)
    assert remotes[0].ready_s == pytest.approx(busy + 0.002)
    assert remotes[1].ready_s == pytest.approx(2 * busy + 0.002)
    assert remotes[1].transfer_s == pytest.approx(2 * busy + 0.002)


def test_blocks_held_during_the_transfer_count_as_used_and_waiting() -> None:
    engine = decode_engine(KVLink(1.0, 0.0))  # slow link: 1,600 tokens take 1.7 s
    engine.add_remote(Sequence("r", 1600, 2, hashes(1, 1600)), 0.0, RemoteKV())
    engine.advance_until(0.5)
    assert engine.num_waiting == 1 and not engine.running and engine.pool.num_used == 100
    engine.abort(engine.receiving[0])
    assert engine.pool.num_used == 0 and not engine.has_work()


def test_an_engine_without_a_link_refuses_disaggregated_requests() -> None:
    from sim.engine.errors import SimError

    with pytest.raises(SimError, match="ingress"):
        Engine(EngineConfig.from_preset("llama3-8b-a100")).add_remote(Sequence("r", 100, 2), 0.0, RemoteKV())


def test_link_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="gbps"):
        KVLink(0.0, 1.0)
