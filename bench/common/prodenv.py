"""The interpreter of a production-like environment, for memory figures that match what we deploy.

The dev venv (``.venv``) carries the dev extras (pandas, scikit-learn, …), and XGBoost imports scikit-learn at
import time whenever it is installed: every server started from ``.venv`` is ~90 MB larger than the same server
in the image (``pip install .``, no extras). Benchmarks that report a server's RSS start it with
``production_python()``: ``.venv-prod`` beside ``.venv``, created on first use with ``pip install -e .`` (the
runtime dependencies only) and re-installed when ``pyproject.toml`` is newer than it.
"""

from __future__ import annotations

import subprocess
import sys

from bench.common.paths import REPO

VENV = REPO / ".venv-prod"


def production_python() -> str:
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime:
        print(f"creating {VENV} (runtime dependencies only) for the memory figures ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO)], check=True)
        stamp.touch()
    probe = "import sys, xgboost; sys.exit('sklearn' in sys.modules or 'pandas' in sys.modules)"
    if subprocess.run([str(python), "-c", probe], check=False).returncode != 0:
        raise RuntimeError(f"{VENV} imports pandas/scikit-learn: not a production-like environment")
    return str(python)
