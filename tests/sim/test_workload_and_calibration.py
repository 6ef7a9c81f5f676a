"""Trace slicing, the synthetic session model, prompt hashing and the calibration command."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibrate import calibration_rows, markdown
from sim.engine import ConfigError
from sim.pod.prompt import account, text_block_hashes
from sim.workload import SessionModel, SessionModelConfig, load_trace


def test_trace_slicing_and_rate_scale(shared_data: Path) -> None:
    path = shared_data / "azure_llm_2023_conv.csv"
    full = load_trace(path, limit=50)
    fast = load_trace(path, rate_scale=4.0, limit=50)
    assert len(full) == 50 and [r.prompt_tokens for r in full] == [r.prompt_tokens for r in fast]
    assert fast[-1].arrival_s == pytest.approx(full[-1].arrival_s / 4)
    window = load_trace(path, start_s=60.0, duration_s=30.0)
    assert window and window[0].arrival_s >= 0.0 and window[-1].arrival_s < 30.0
    with pytest.raises(ConfigError):
        load_trace(path, rate_scale=0)


def test_session_model_is_deterministic_and_shares_prefixes() -> None:
    def assign(seed: int) -> list[tuple[str, tuple[int, ...]]]:
        model = SessionModel(SessionModelConfig(p_followup=0.5), seed=seed)
        return [model.assign(i * 1.0, 200 + 50 * i, 40) for i in range(60)]

    a, b = assign(1), assign(1)
    assert a == b and a != assign(2)
    keys = [k for k, _ in a]
    assert len(set(keys)) < len(keys), "some requests continue an earlier session"
    by_key: dict[str, tuple[int, ...]] = {}
    for key, hashes in a:
        if key in by_key:
            prev = by_key[key]
            assert hashes[: len(prev)] == prev, "a follow-up turn extends its session's prefix"
        by_key[key] = hashes


def test_prompt_hashing_shares_leading_blocks() -> None:
    system = "S" * 640
    h1 = text_block_hashes(system + "question one")
    h2 = text_block_hashes(system + "another question entirely")
    assert h1[:10] == h2[:10] and len(h1) == 10
    assert account("abcdefgh", None, None) == (2, ())
    tokens, hashes = account(None, list(range(40)), None)
    assert tokens == 40 and len(hashes) == 2
    assert account(system, None, 32)[1] == text_block_hashes(system)[:2]


def test_calibration_table_has_reference_points() -> None:
    rows = {r["tokens"]: r for r in calibration_rows("llama3-8b-a100")}
    assert rows[2048]["ref_linear_ms"] == 146.0
    assert rows[2048]["prefill_step_ms"] > rows[2048]["linear_ms"]
    assert rows[256]["decode_step_ms"] > rows[1]["decode_step_ms"]
    text = markdown(["llama2-7b-h100"])
    assert "| 512 | 12.0 | 12.0 |" in text and "tok/s" in text
