"""Start-up paths: reuse the live bundle, reject a tampered one, import a seed export; mean objective; CLI."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shared.bundle import current_version, version_dir
from trainer.__main__ import parse_args


def svc(client: TestClient):  # type: ignore[no-untyped-def]
    return client.app.state.service  # type: ignore[attr-defined]


def test_restart_reuses_live_bundle_and_window(client_factory: Callable[..., TestClient],
                                               rows_of: Callable[..., list]) -> None:
    first = client_factory()
    first.post("/add_training_data_bulk", json={"entries": rows_of(1000)})
    assert svc(first).loop.run_cycle() == 2
    first.__exit__(None, None, None)
    second = client_factory()
    assert second.get("/bundle/manifest").headers["etag"] == '"v2"'
    status = second.get("/data/status").json()
    assert status["durable"]["rows"] == 1000
    assert status["training_data"]["total_samples"] + status["test_data"]["total_samples"] == 1000


def test_tampered_live_bundle_is_replaced(client_factory: Callable[..., TestClient], tmp_path: Path) -> None:
    first = client_factory(bundle_hmac_key="k1")
    first.__exit__(None, None, None)
    root = tmp_path / "data" / "bundles"
    model = version_dir(root, 1) / "ttft.ubj"
    data = bytearray(model.read_bytes())
    data[10] ^= 0xFF
    model.write_bytes(bytes(data))
    second = client_factory(bundle_hmac_key="k1")
    assert second.get("/readyz").status_code == 200
    assert current_version(root) == 2


def test_seed_export_is_imported(client_factory: Callable[..., TestClient], rows_of: Callable[..., list],
                                 tmp_path: Path) -> None:
    source = client_factory(data_dir=str(tmp_path / "a"))
    source.post("/add_training_data_bulk", json={"entries": rows_of(1000)})
    svc(source).loop.run_cycle()
    exported = source.get("/model/export").content
    seed = tmp_path / "b" / "seed"
    seed.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(exported), mode="r:gz") as tar:
        tar.extractall(seed, filter="data")
    fresh = client_factory(data_dir=str(tmp_path / "b"))
    assert fresh.get("/model/ttft/download").content == source.get("/model/ttft/download").content
    assert svc(fresh).live.get().bundle.manifest.prior is False


def test_mean_objective_trains(client_factory: Callable[..., TestClient], rows_of: Callable[..., list]) -> None:
    c = client_factory(objective_type="mean")
    c.post("/add_training_data_bulk", json={"entries": rows_of(1000)})
    assert svc(c).loop.run_cycle() == 2
    entry = svc(c).live.get().bundle.model_entry("ttft")
    assert entry.objective == "mean" and entry.calibration is not None
    assert entry.calibration.written() == {"scale": 1.0, "offset": 0.0}
    assert 'ttft_mae{idx="0"}' in c.get("/metrics").text


@pytest.mark.parametrize(("argv", "expected"), [([], (None, None, None)),
                                                (["--host", "127.0.0.1", "--port", "9", "--data-dir", "/x"],
                                                 ("127.0.0.1", 9, "/x"))])
def test_cli_args(argv: list[str], expected: tuple) -> None:
    args = parse_args(argv)
    assert (args.host, args.port, args.data_dir) == expected
