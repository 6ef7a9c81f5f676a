"""``python -m demo`` end to end, shortened: the stack starts, the status page URLs are printed, load flows,
the summary and the HTML report are written (with the verdict on the predictions) and every child process is
gone afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson

from shared.charts import esc

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_and_writes_the_summary(tmp_path: Path) -> None:
    workdir, summary_path = tmp_path / "demo-data", tmp_path / "demo-summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "demo", "--duration", "8", "--rate-scale", "2", "--time-scale", "0.1",
         "--retrain-interval", "2", "--shed-every", "3", "--workdir", str(workdir), "--summary", str(summary_path)],
        cwd=REPO, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = orjson.loads(summary_path.read_bytes())
    for key in ("requests", "errors", "per_pool", "per_pod", "samples_reported", "retrains", "shed"):
        assert key in summary, key
    assert summary["requests"] > 20 and summary["errors"] == 0
    assert sum(summary["per_pool"].values()) == sum(summary["per_pod"].values()) > 0
    assert summary["shed"] >= 1 and summary["samples_reported"] > 0
    assert "=== decision mix ===" in proc.stdout and "predicted" in proc.stdout
    assert re.search(r"router +http://127\.0\.0\.1:\d+/ui", proc.stdout), proc.stdout[:2000]
    assert len(re.findall(r"trainer +http://127\.0\.0\.1:\d+/ui", proc.stdout)) == 2
    line = summary["verdict"]["line"]
    assert line.startswith(("Predictions MET", "Predictions did NOT meet", "No predictions")) and line in proc.stdout
    assert summary["requests_joined"] > 0.8 * sum(summary["per_pool"].values())
    short = summary["accuracy"]["short"]["ttft"]
    assert short["pairs"] > 0 and 0.0 <= short["coverage"] <= 1.0
    parts = summary["client_observed"]["short"]["parts"]
    assert abs(sum(p["mean_ms"] for p in parts.values()) - summary["client_observed"]["short"]["client_ttft"][
        "mean_ms"]) < 0.1
    report = (tmp_path / "demo-report.html").read_text()
    assert esc(line) in report and report.count('<svg class="chart') >= 6
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", f"child processes left behind: {leftover.stdout}"
