"""bench.routing_tail on a tiny slice: the policy analysed is selectable, and the summary names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.routing_tail import main


@pytest.mark.timeout(300)
def test_the_tail_of_a_registered_variant(tmp_path: Path) -> None:
    out, csv_path = tmp_path / "tail.json", tmp_path / "tail.csv"
    assert main(["--trace", "code", "--rate-scale", "4", "--start", "800", "--limit", "120", "--cost-every", "0",
                 "--policy", "pl-no-explore", "--policy-module", "bench.routing_variants",
                 "--out", str(out), "--csv", str(csv_path)]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["policy"] == "pl-no-explore" and doc["settings"]["requests"] == 120
    assert "explore" not in doc["pl_all"]["reasons"]  # exploration 0 reached its core (predicted-latency: 3 here)
    assert doc["pl_p99_set"]["n"] >= 1 and "share_avoidable_at_dispatch" in doc["pl_p99_set"]
    assert len(csv_path.read_text().splitlines()) == 121
