"""sim.prior_seed: a profile's physical base learnt in the simulator, a seed bundle a trainer imports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from shared.bundle import assemble, in_memory, read_bundle
from shared.features import FeatureSpec
from shared.model import load_bundle
from shared.trainer_settings import TrainerSettings
from sim.engine.measured import load_profile
from sim.policies.retrainer import sample_matrix
from sim.prior_seed import SeedPlan, build_seed, main, replay_samples
from trainer.app import create_app
from trainer.cycle import bundle_meta
from trainer.fit import FitParams, matrix_columns
from trainer.prior import fit_prior
from trainer.store.record import STORED_FIELDS

PROFILE = Path(__file__).resolve().parents[2] / "bench" / "results" / "fidelity" / "fidelity-conv.profile.json"
PLAN = SeedPlan(PROFILE, traces=("conv",), rps_per_pod=(0.1, 0.4), requests=120)
PARAMS = FitParams(rounds=30, quantile_rows=2000)


def coverage(model, matrix: np.ndarray, name: str) -> float:  # type: ignore[no-untyped-def]
    y = matrix[:, STORED_FIELDS.index(f"actual_{name}_ms")]
    return float(np.mean(y <= model.predict(name, matrix_columns(name, matrix, True))))


def test_seed_is_a_prior_the_trainer_imports(tmp_path: Path) -> None:
    seed = build_seed(PLAN, tmp_path / "seed", PARAMS)
    bundle = read_bundle(seed, None)
    assert bundle.manifest.prior and all(bundle.model_entry(n).prior for n in ("ttft", "tpot"))
    for name in ("ttft", "tpot"):
        entry = bundle.model_entry(name)
        assert entry.candidate == "base" and entry.base is not None and entry.base.source == "profile"
        assert entry.quantile_rounds == 0 and entry.location_file is None
    settings = TrainerSettings(data_dir=str(tmp_path / "data"), seed_dir=str(seed), retraining_interval_sec=3600.0,
                               train_threads=1)
    with TestClient(create_app(settings, run_loop=False)) as client:
        live = client.app.state.service.live.get()  # type: ignore[attr-defined]
        assert live.version == 1 and live.bundle.manifest.prior
        assert client.get("/model/ttft/download").content == (seed / "ttft.ubj").read_bytes()


def test_seed_covers_fresh_replays_of_its_engine_where_the_gpu_prior_does_not(tmp_path: Path) -> None:
    spec = FeatureSpec()
    seed = load_bundle(read_bundle(build_seed(PLAN, tmp_path / "seed", PARAMS), None), spec, nthread=1)
    fresh = sample_matrix(replay_samples(SeedPlan(PROFILE, traces=("conv",), rps_per_pod=(0.25,), requests=150,
                                                  seed=7)))
    params = FitParams()
    manifest, files = assemble(1, "2026-12-02T00:00:00Z", fit_prior(spec, params.served, params.alpha),
                               bundle_meta(spec, params, prior=True), None)
    gpu = load_bundle(in_memory(manifest, files), spec, nthread=1)
    for name in ("ttft", "tpot"):
        assert 0.75 <= coverage(seed, fresh, name) <= 1.0, name
        assert coverage(gpu, fresh, name) < 0.5, name  # an ~8B model on a GPU is far faster than this CPU engine
    # the samples carry the class the router sends ('' by default), not the simulator's preset name
    assert set(fresh[:, STORED_FIELDS.index("pod_class")]) == {0.0}
    assert load_profile(PROFILE).engine.name == "tiny-llama"


def test_cli_writes_a_bundle_directory(tmp_path: Path) -> None:
    main(["--profile", str(PROFILE), "--out", str(tmp_path / "s"), "--traces", "conv", "--rps-per-pod", "0.2",
          "--requests", "80"])
    assert (tmp_path / "s" / "manifest.json").is_file() and (tmp_path / "s" / "ttft.ubj").is_file()
