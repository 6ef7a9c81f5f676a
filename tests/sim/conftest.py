"""Shared fixtures for the simulator tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from sim.engine import Engine, EngineConfig, Sequence

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO / ".." / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    assert (SHARED_DATA / "azure_llm_2023_conv.csv").is_file(), f"shared data missing at {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture
def small_cfg() -> EngineConfig:
    """A100 preset with a tiny KV cache (1024 tokens) and no noise."""
    return EngineConfig.from_preset(
        "llama3-8b-a100", num_gpu_blocks_override=64, max_model_len=512, noise_std=0.0, max_num_seqs=32
    )


@pytest.fixture
def quiet_cfg() -> EngineConfig:
    """A100 preset, full-size KV, no noise."""
    return EngineConfig.from_preset("llama3-8b-a100", noise_std=0.0)


Arrival = tuple[float, Sequence]


def _run(engine: Engine, arrivals: Iterable[Arrival], check: Callable[[Engine], None] | None = None) -> None:
    for t, seq in sorted(arrivals, key=lambda a: a[0]):
        while engine.has_work() and engine.clock < t:
            engine.step()
            if check:
                check(engine)
        engine.add(seq, t)
    while engine.step() is not None:
        if check:
            check(engine)


@pytest.fixture(scope="session")
def run_engine() -> Callable[..., None]:
    """``run_engine(engine, [(t, seq), ...], check=None)``: step-by-step until every request is done."""
    return _run

