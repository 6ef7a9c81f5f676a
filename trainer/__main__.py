"""``latency-trainer`` / ``python -m trainer``: --host --port --data-dir (env: TRAINING_HOST, ...)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn

from shared.trainer_settings import TrainerSettings

GRACEFUL_SHUTDOWN_S = 5  # held long-polls (wait_s ≤ 30) must not delay a restart
NOT_IMPORTED = ("sklearn",)
"""XGBoost imports scikit-learn (and with it scipy.stats and pandas) whenever it is installed, as in the ``[dev]``
virtualenv, for its scikit-learn wrapper, which the trainer never uses: 2 s of CPU at every start and ~90 MiB
resident. The server process marks it absent before XGBoost is first imported (XGBoost then defines its own
stand-ins); offline tools that score with scikit-learn import it as usual."""


def skip_unused_imports() -> None:
    """Make ``import sklearn`` fail in this process (``sys.modules[name] = None``) unless it is already loaded."""
    for name in NOT_IMPORTED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


class _Server(uvicorn.Server):
    """uvicorn server that first answers held long-polls (304) when asked to exit."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="latency-trainer", description="Latency training server (llm-d wire).")
    parser.add_argument("--host", help="bind address (env TRAINING_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="bind port (env TRAINING_PORT, default 8000)")
    parser.add_argument("--data-dir", dest="data_dir", help="durable log + bundles (env LATENCY_DATA_DIR)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    skip_unused_imports()
    from trainer.app import create_app  # after skip_unused_imports: it imports XGBoost

    settings = TrainerSettings.from_env(host=args.host, port=args.port, data_dir=args.data_dir)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                            access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                            timeout_keep_alive=settings.keepalive_timeout_sec)
    _Server(config, app.state.service.live.close).run()


if __name__ == "__main__":
    main()
