"""A trainer's first bundle for real engines: learnt in the simulator from the engine's measured profile.

The trainer's built-in prior is a GPU roofline (an ~8B model on one GPU); a CPU engine runs the tiny model 4-6x
slower at every load, so until the first retrains the router ranks pods by latencies it does not see. Given
a measured profile of the engine (``python -m bench.engine_profile``), :func:`seed_env` replays the traces on
simulated pods of that profile (:mod:`sim.prior_seed`), writes the bundle into ``out`` and returns the trainer
settings that start from it (``LATENCY_SEED_DIR``). ``make demo-engine`` and ``bench.real_engine`` use the
profile committed for the default model (:data:`DEFAULT_PROFILE`, measured on a 2-core machine of this kind)
unless told otherwise.
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
