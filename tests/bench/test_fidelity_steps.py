"""bench.fidelity_steps: vLLM's iteration lines parsed and priced with the profile's step formula."""

from __future__ import annotations

import pytest

from bench.fidelity_steps import LoggedStep, formula_ms, parse, table
from demo.prior import DEFAULT_PROFILE
from sim.engine.measured import load_profile

LINES = [
    "(APIServer pid=1) INFO 12-03 07:29:23 [loggers.py:199] Engine 000: Iteration(0): 1 context requests, 374 context "
    "tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 202.12 ms, CPU KV cache usage: 0.3%",
    "(APIServer pid=1) INFO 12-03 07:29:23 [loggers.py:199] Engine 000: Iteration(1): 0 context requests, 0 context "
    "tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 16.94 ms, CPU KV cache usage: 2.5%",
    "(APIServer pid=1) INFO 12-03 07:29:23 [loggers.py:122] Engine 000: Avg prompt throughput: 1.0 tokens/s",
]


def test_iteration_lines_are_parsed_and_others_ignored() -> None:
    steps = list(parse(LINES))
    assert steps == [LoggedStep(1, 374, 0, 0, 202.12, 0.003), LoggedStep(0, 0, 3, 3, 16.94, 0.025)]
    assert [s.kind for s in steps] == ["prefill only", "decode only, batch 1-3"]


def test_a_decode_step_is_priced_like_the_simulators_step() -> None:
    profile = load_profile(DEFAULT_PROFILE)
    step = LoggedStep(0, 0, 3, 3, 16.94, 0.025)
    kv = 0.025 * profile.engine.num_blocks * profile.engine.block_size
    f = profile.fit
    want = (f.overhead_ms + 3 * f.per_seq_ms + f.token_ms_table(2048)[3]
            + (f.decode_ms_per_kv_token + f.decode_ms_per_unique_kv_token) * kv)
    assert formula_ms(profile, step) == pytest.approx(want)
    assert "| decode only, batch 1-3 | 1 |" in table(profile, [step])
