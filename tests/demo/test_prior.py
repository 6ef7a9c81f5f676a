"""The real-engine demo and benchmark start their trainers from the physical base of the engine's measured profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.real_engine.__main__ import prior_profile
from bench.real_engine.cli import parse_args as bench_args
from demo import prior
from demo.__main__ import parse_args as demo_args
from demo.__main__ import prior_profile as demo_profile
from demo.engine import DEFAULT_MODEL
from sim.engine.measured import load_profile

BENCH = ["--trace", "t.csv", "--rps", "1", "--duration", "10", "--policy", "round-robin", "--out", "o.json"]


def test_the_default_models_profile_is_committed_and_separates_distinct_tokens() -> None:
    profile = load_profile(prior.DEFAULT_PROFILE)
    assert profile.engine.name == "tiny-llama"
    assert profile.fit.decode_ms_per_unique_kv_token > 0.0
    assert any(d.unique_kv is not None and d.unique_kv < d.batch * d.context for d in profile.decode)


def test_the_committed_profile_is_used_only_for_the_default_model(tmp_path: Path) -> None:
    assert prior.default_profile(DEFAULT_MODEL, DEFAULT_MODEL) == prior.DEFAULT_PROFILE
    assert prior.default_profile(tmp_path / "other-model", DEFAULT_MODEL) is None


def test_demo_with_engines_seeds_unless_told_not_to(tmp_path: Path) -> None:
    assert demo_profile(demo_args(["--workdir", str(tmp_path)])) is None  # sim pods: the pods' own prior
    assert demo_profile(demo_args(["--engines", "2", "--workdir", str(tmp_path)])) == prior.DEFAULT_PROFILE
    off = demo_args(["--engines", "2", "--no-prior-profile", "--workdir", str(tmp_path)])
    assert demo_profile(off) is None
    other = demo_args(["--engines", "2", "--model", str(tmp_path / "m"), "--workdir", str(tmp_path)])
    assert demo_profile(other) is None


def test_bench_real_engine_picks_the_profile() -> None:
    assert prior_profile(bench_args(BENCH)) == prior.DEFAULT_PROFILE
    assert prior_profile(bench_args([*BENCH, "--no-prior-profile"])) is None
    assert prior_profile(bench_args([*BENCH, "--prior-profile", str(prior.DEFAULT_PROFILE)])) == prior.DEFAULT_PROFILE


@pytest.mark.parametrize("parse", [lambda a: bench_args([*BENCH, *a]), demo_args])
def test_a_missing_profile_is_refused_at_the_command_line(
        parse: Callable[[list[str]], object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--prior-profile", str(tmp_path / "none.json")])
    assert exc.value.code == 2 and "--prior-profile" in capsys.readouterr().err
