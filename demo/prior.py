"""A trainer's first bundle for real engines: learnt in the simulator from the engine's measured profile.

The trainer's built-in prior is a GPU roofline (an ~8B model on one GPU); a CPU engine runs the tiny model 4-6x
slower at every load, so until the first retrains the router ranks pods by latencies it does not see. Given
a measured profile of the engine (``python -m bench.engine_profile``), :func:`seed_env` replays the traces on
simulated pods of that profile (:mod:`sim.prior_seed`), writes the bundle into ``out`` and returns the trainer
settings that start from it (``LATENCY_SEED_DIR``). ``make demo-engine`` and ``bench.real_engine`` use the
profile committed for the default model (:data:`DEFAULT_PROFILE`, measured on a 2-core machine of this kind)
unless told otherwise.

The profile is measured on one engine with the machine's other core free for its API server and scheduler; the
demo and the benchmark run two engines and the whole stack on two cores, and every step there takes longer. The
seed is therefore learnt with every simulated step :data:`DEPLOYED_SPEED_FACTOR` times the profile's — times this
machine's slowdown against the profile's machine when the demo is asked to probe it at start (``--speed-probe``,
:mod:`demo.speed_probe`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sim.prior_seed import SeedPlan, build_seed

DEFAULT_PROFILE = Path(__file__).resolve().parent / "profiles" / "tiny-llama.json"
"""The default tiny model's profile (``make engine`` builds that model, seeded: the same weights everywhere)."""

DEPLOYED_SPEED_FACTOR = 2.0
"""Step-time factor of two engines + the stack on two cores against the profile's one engine with a core to spare.
Chosen by p90 pinball on the 504 samples the six policies' trainers stored on conv (2026-12-03 real-engine run):
factors 1 / 1.5 / 2 / 3 gave TTFT pinball 603 / 433 / 274 / 272 and TPOT 12.5 / 11.4 / 10.9 / 16.2; checked on the
180 code samples: TTFT 498 → 273 at 2, TPOT 19 → 39 (BENCHMARKS.md, "Real engines")."""


def default_profile(model_dir: Path, default_model: Path) -> Path | None:
    """The committed profile when ``model_dir`` is the default model, else None (no profile, no seed)."""
    same = model_dir.resolve() == default_model.resolve()
    return DEFAULT_PROFILE if same and DEFAULT_PROFILE.is_file() else None


def seed_env(profile: Path, out: Path, speed_factor: float = DEPLOYED_SPEED_FACTOR) -> dict[str, str]:
    """Build the seed bundle for ``profile`` (steps ``speed_factor`` × the profile's) into ``out``; the trainer
    environment that starts from it."""
    started = time.monotonic()
    build_seed(SeedPlan(profile, speed_factor=speed_factor), out, log=sys.stderr)
    print(f"prior: seed bundle from {profile.name} (steps x{speed_factor:g}) in {time.monotonic() - started:.1f} s "
          f"({out})", file=sys.stderr, flush=True)
    return {"LATENCY_SEED_DIR": str(out)}
