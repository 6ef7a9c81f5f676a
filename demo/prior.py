"""The real-engine demo's and benchmark's trainer prior: a physical base learnt on the engine's measured profile.

The built-in prior is the default physical base (a GPU roofline of an ~8B model, ``shared.base``). Given a measured
profile of the engine (``python -m bench.fidelity.engine_profile``), :func:`seed_env` replays the traces on simulated
pods of that profile (:mod:`sim.prior_seed`), fits the trainer's base on the samples, writes the seed bundle into
``out`` and returns the trainer environment that imports it (``LATENCY_SEED_DIR``). The trainer refits the base's
level from the engine's first five rows, so a machine slower than the profile's needs no factor of its own.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sim.prior_seed import SeedPlan, build_seed

DEFAULT_PROFILE = Path(__file__).resolve().parent / "profiles" / "tiny-llama.json"
"""The default tiny model's profile (``make engine`` builds that model, seeded: the same weights everywhere)."""

def default_profile(model_dir: Path, default_model: Path) -> Path | None:
    """The committed profile when ``model_dir`` is the default model, else None (no profile, no seed)."""
    same = model_dir.resolve() == default_model.resolve()
    return DEFAULT_PROFILE if same and DEFAULT_PROFILE.is_file() else None


def seed_env(profile: Path, out: Path) -> dict[str, str]:
    """Build the seed bundle for ``profile`` into ``out``; the trainer environment that starts from it."""
    started = time.monotonic()
    build_seed(SeedPlan(profile), out, log=sys.stderr)
    print(f"prior: seed bundle from {profile.name} in {time.monotonic() - started:.1f} s ({out})", file=sys.stderr,
          flush=True)
    return {"LATENCY_SEED_DIR": str(out)}
