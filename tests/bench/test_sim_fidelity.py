"""bench.fidelity.sim_fidelity without an engine: the request stream, the metrics, the stream client's accounting."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fidelity.engine_stream import StreamTiming, _account
from bench.fidelity.metrics import METRICS, Outcome, compare, noise, summarize
from bench.fidelity.sim_fidelity import build_parser
from bench.fidelity.workload import WORKLOAD_BLOCK, build_stream, burst

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "azure_llm_2023_conv.csv"


def test_stream_has_the_rate_and_the_same_prefix_structure_for_engine_and_simulator() -> None:
    stream = build_stream(TRACE, rate_rps=0.5, duration_s=60, max_model_len=4096)
    assert len(stream.requests) == 30
    assert stream.requests[0].arrival_s == 0.0
    assert (len(stream.requests) - 1) / stream.span_s == pytest.approx(0.5)
    assert all(r.prompt_tokens + r.output_tokens <= 4095 for r in stream.requests)
    sim = stream.sim_requests(128)
    for tok, req in zip(stream.requests, sim, strict=True):
        assert len(req.block_hashes) == len(tok.hashes) // 8
        assert (req.prompt_tokens, req.output_tokens, req.arrival_s) == (tok.prompt_tokens, tok.output_tokens,
                                                                          tok.arrival_s)
    shared = [(a, b) for a in sim for b in sim if a is not b and a.block_hashes[:1] and
              a.block_hashes[:1] == b.block_hashes[:1]]
    assert shared, "the slice should share some 128-token prefixes (system prompts, follow-ups)"
    a, b = shared[0]
    ta, tb = (stream.requests[sim.index(x)] for x in (a, b))
    assert ta.token_ids(WORKLOAD_BLOCK, 8192)[:128] == tb.token_ids(WORKLOAD_BLOCK, 8192)[:128]


def test_burst_sends_everything_at_once() -> None:
    stream = burst(build_stream(TRACE, 1.0, 10, 4096))
    assert {r.arrival_s for r in stream.requests} == {0.0}


def test_summary_percentiles_and_throughput() -> None:
    outs = [Outcome(float(i), 0.1 * (i + 1), 0.02, 1.0 + i) for i in range(10)]
    outs.append(Outcome(10.0, 0.5, None, 0.5))
    s = summarize(outs)
    assert set(s) == set(METRICS)
    assert s["tpot_p50"] == pytest.approx(20.0)
    assert s["ttft_p50"] == pytest.approx(500.0)
    assert s["throughput_rps"] == pytest.approx(11 / 19.0)


def test_rows_carry_relative_error_and_noise_rows_the_difference() -> None:
    real = dict.fromkeys(METRICS, 100.0)
    sim = dict.fromkeys(METRICS, 110.0)
    rows = compare(0.6, real, sim)
    assert [r["metric"] for r in rows] == list(METRICS)
    assert all(r["rel_err"] == pytest.approx(0.1) and r["load"] == 0.6 for r in rows)
    assert noise(0.6, real, sim)[0]["rel_diff"] == pytest.approx(0.1)


def test_stream_accounting_counts_tokens_per_chunk() -> None:
    t = StreamTiming(sent_at=0.0, status=200)
    _account(t, 'data: {"choices": [{"text": "ab", "token_ids": [5, 6]}]}')
    _account(t, 'data: {"choices": [{"text": "c"}]}')
    _account(t, 'data: {"choices": [], "usage": {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}}')
    _account(t, "data: [DONE]")
    assert len(t.token_times) == 3 and t.ok
    assert (t.prompt_tokens, t.cached_tokens) == (7, 0)


def test_repeat_must_be_one_of_the_loads() -> None:
    from bench.fidelity.sim_fidelity import main

    with pytest.raises(SystemExit):
        main(["--out", "x.json", "--loads", "0.3,0.6", "--repeat", "0.9"])
    args = build_parser().parse_args(["--out", "x.json", "--loads", "0.3,0.9"])
    assert args.loads == [0.3, 0.9]
