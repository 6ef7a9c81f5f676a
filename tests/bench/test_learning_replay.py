"""``bench.trainer.learning_replay``: a committed real-engine trainer log replayed through a fresh trainer, offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.common.paths import RESULTS
from bench.trainer.learning_replay import Dispatches, _parse_set, main, record_rows, records

LOGS = RESULTS / "real_engine" / "learning-logs"


def test_every_stored_row_finds_its_dispatch_in_the_runs_request_csv() -> None:
    recs = records(LOGS / "code-round-robin")
    dispatches = Dispatches.read(LOGS / "code-round-robin-requests.csv")
    assert sum(r.n_rows for r in recs) == 30
    first = recs[0].wall_time
    at = np.concatenate([dispatches.at(r, first) for r in recs])
    offsets = sorted(dispatches.by_key.values())
    assert len(offsets) == 30 and np.allclose(sorted(at - at.min()), np.array(offsets) - offsets[0], atol=1e-6)


def test_a_replay_scores_every_row_and_publishes(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    main(["--log", str(LOGS / "code-round-robin"), "--requests", str(LOGS / "code-round-robin-requests.csv"),
          "--set", "train_threads=1", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "learning-replay" and doc["settings"]["trainer"]["train_threads"] == 1
    result = doc["figures"]
    (log,) = result["logs"].values()
    assert log["ttft"]["all"]["rows"] == log["tpot"]["all"]["rows"] == 30
    assert 0.0 <= log["ttft"]["all"]["coverage"] <= 1.0 and log["ttft"]["all"]["pinball"] > 0
    assert log["versions"] and log["versions"][0]["version"] == 2
    assert set(result["totals"]) == {"code ttft", "code tpot"} and result["totals"]["code ttft"]["logs"] == 1


def test_set_values_are_json_where_they_parse_and_strings_otherwise() -> None:
    assert _parse_set(["a=2.0", "b=true", "c=", "d=ttft,tpot", "e=[1, 2]", "f=l1"]) == {
        "a": 2.0, "b": True, "c": "", "d": "ttft,tpot", "e": [1, 2], "f": "l1"}


def test_a_record_is_slower_than_every_row_dispatched_five_seconds_before() -> None:
    at = np.array([0.0, 1.0, 10.0, 10.5, 20.0])
    y = np.array([5.0, 9.0, 8.0, 20.0, 7.0])
    judged = at >= 10  # row 3 (20 ms) beats rows 0-1 (≤ 9); row 2 (8) does not; row 4's history holds 20
    assert record_rows(at, y, judged) == {"records_after": 1, "records_expected": round(1 / 3 + 1 / 3 + 1 / 5, 2)}
