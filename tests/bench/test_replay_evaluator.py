"""bench.bench_replay_evaluator on a short replay: both evaluators answer alike and both are timed."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_replay_evaluator import main


def test_the_forest_and_xgboost_answer_alike_and_are_both_timed(tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    assert main(["--calls", "5", "--requests", "300", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["pods"] for r in rows] == [4, 8, 16]
    assert all(r["equal"] and r["xgboost_us"] > 0 and r["forest_us"] > 0 for r in rows)
