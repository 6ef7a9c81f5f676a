"""Where the benchmarks live and write: the repository root, the tracked results, the git-ignored scratch dir.

Every benchmark computes its paths from here (not from ``Path(__file__).parents[n]``, which depends on how deep
the module sits). ``RESULTS / <area>`` holds the tracked result files of an area; ``OUT`` is scratch space
(``/bench/out/`` in ``.gitignore``).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
OUT = REPO / "bench" / "out"
