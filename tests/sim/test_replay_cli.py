"""``python -m sim.replay`` as a subprocess: outputs, plugin policies, pools, trainer upload."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sim.cluster import TRAINING_FIELDS

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def _replay(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(PLUGINS)])}
    cmd = [sys.executable, "-m", "sim.replay", "--limit", "300", "--rate-scale", "4", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


class _Trainer(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ok = self.path == "/add_training_data_bulk"
        if ok:
            self.received.extend(body["entries"])
        self.send_response(202 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        message = f"Accepted {len(body['entries'])} training samples."
        self.wfile.write(json.dumps({"message": message}).encode())

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@pytest.fixture
def trainer() -> Iterator[str]:
    _Trainer.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trainer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_single_policy_outputs(tmp_path: Path, trainer: str) -> None:
    out, samples, reqs = tmp_path / "s.json", tmp_path / "samples.csv", tmp_path / "reqs.csv"
    res = _replay("--pods", "3", "--policy", "least-kv", "--seed", "5", "--out", str(out),
                  "--samples-csv", str(samples), "--requests-csv", str(reqs), "--trainer-url", trainer)
    assert res.returncode == 0, res.stderr
    summary = json.loads(out.read_text())
    for key in ("requests", "ttft_ms", "tpot_ms", "preemptions_per_1k", "per_pod_share", "wall_s"):
        assert key in summary
    assert summary["requests"] == 300 and len(summary["per_pod_share"]) == 3
    assert "%" in res.stderr and "least-kv" in res.stdout  # progress bar + table
    with samples.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 300 and tuple(rows[0]) == TRAINING_FIELDS
    assert len(_Trainer.received) == 300 and set(_Trainer.received[0]) == set(TRAINING_FIELDS)
    with reqs.open() as fh:
        assert len(list(csv.DictReader(fh))) == 300


def test_compare_policies_with_plot_and_plugin(tmp_path: Path) -> None:
    out, plot = tmp_path / "cmp.json", tmp_path / "ttft.png"
    res = _replay("--pools", "short:2,long:1", "--max-model-len", "8192",
                  "--policy-module", "sim_test_plugin", "--policy", "round-robin,first-fit-predicting",
                  "--policy-opt", "first-fit-predicting.max_prompt=2500", "--slo-ttft-ms", "300",
                  "--out", str(out), "--plot", str(plot), "--quiet")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())["policies"]
    assert set(doc) == {"round-robin", "first-fit-predicting"}
    plugin = doc["first-fit-predicting"]
    assert plugin["shed"] > 0 and plugin["shed_reasons"] == {"too_big_for_test": plugin["shed"]}
    assert plugin["prediction_error"]["ttft"]["n"] == plugin["completed"]
    assert "slo_attainment" in doc["round-robin"]
    assert set(doc["round-robin"]["per_pod_share"]) == {"short-0", "short-1", "long-0"}
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_cluster_config_file_and_errors(tmp_path: Path) -> None:
    conf = tmp_path / "cluster.toml"
    conf.write_text('scrape_interval_s = 0.2\n[[pools]]\nname = "short"\ncount = 2\nmax_model_len = 2048\n'
                    '[[pools]]\nname = "long"\ncount = 1\npreset = "llama2-7b-h100"\n')
    out = tmp_path / "s.json"
    res = _replay("--cluster-config", str(conf), "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    assert set(json.loads(out.read_text())["per_pod"]) == {"short-0", "short-1", "long-0"}
    bad = _replay("--policy", "no-such-policy", "--quiet")
    assert bad.returncode == 2 and "unknown policy" in bad.stderr
    conf.write_text('[[pools]]\nname = "a"\ncount = 1\nmax_model_lenn = 5\n')
    bad = _replay("--cluster-config", str(conf), "--quiet")
    assert bad.returncode == 2 and "max_model_lenn" in bad.stderr


def test_scenario_file(tmp_path: Path) -> None:
    scenario, out, reqs = tmp_path / "s.toml", tmp_path / "s.json", tmp_path / "r.csv"
    scenario.write_text('[[events]]\nat_fraction = 0.5\npod = "pod-1"\nspeed_factor = 2.0\n'
                        '[[events]]\nat_s = 1.0\npod = "pod-0"\nflush_prefix_cache = true\n')
    res = _replay("--pods", "2", "--scenario", str(scenario), "--out", str(out), "--requests-csv", str(reqs),
                  "--quiet")
    assert res.returncode == 0, res.stderr
    per_pod = json.loads(out.read_text())["per_pod"]
    assert [e["speed_factor"] for e in per_pod["pod-1"]["events"]] == [2.0]
    assert per_pod["pod-0"]["events"] == [{"at_s": 1.0, "flush_prefix_cache": True}]
    with reqs.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {"pod_id", "arrival_s", "aborted"} <= set(rows[0])
    scenario.write_text('[[events]]\nat_s = 1.0\npod = "pod-5"\nspeed_factor = 2.0\n')
    bad = _replay("--pods", "2", "--scenario", str(scenario), "--quiet")
    assert bad.returncode == 2 and "event 0: 'pod' = 'pod-5' does not exist" in bad.stderr


def test_request_budget_flags(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = _replay("--pods", "2", "--max-tokens-policy", "fixed:64", "--hide-output-length", "--out", str(out),
                  "--quiet")
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["request_budget"] == {"max_tokens_policy": "fixed:64",
                                                             "output_length": "hidden"}
    res = _replay("--pods", "2", "--expose-output-length", "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["request_budget"] == {"max_tokens_policy": "fixed:1024",
                                                             "output_length": "oracle"}
    bad = _replay("--max-tokens-policy", "fixed:lots", "--quiet")
    assert bad.returncode == 2 and "--max-tokens-policy" in bad.stderr
    both = _replay("--hide-output-length", "--expose-output-length", "--quiet")
    assert both.returncode == 2 and "contradict" in both.stderr
def test_trainer_upload_sends_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a real token-protected trainer: --trainer-token-file, $LATENCY_WRITE_TOKEN, and a wrong token."""
    import httpx

    from tests.procs import trainer as real_trainer

    (tmp_path / "token").write_text("replay-token\n")
    with real_trainer(tmp_path / "data", {"LATENCY_WRITE_TOKEN": "replay-token"}) as (url, _):
        args = ("--pods", "2", "--quiet", "--trainer-url", url)
        res = _replay(*args, "--trainer-token-file", str(tmp_path / "token"))
        assert res.returncode == 0, res.stderr
        monkeypatch.setenv("LATENCY_WRITE_TOKEN", "replay-token")
        assert _replay(*args).returncode == 0
        monkeypatch.setenv("LATENCY_WRITE_TOKEN", "wrong")
        bad = _replay(*args)
        assert bad.returncode == 2 and "403" in bad.stderr
        assert httpx.get(f"{url}/data/status", timeout=10).json()["durable"]["rows"] == 600
