"""``python -m predictor`` / ``latency-predictor``: one uvicorn process serving ``create_app``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import uvicorn

from predictor.app import create_app
from shared.predictor_settings import PredictorSettings


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="latency-predictor", description=__doc__)
    parser.add_argument("--host", help="bind address (env PREDICT_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="bind port (env PREDICT_PORT, default 8001)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--training-url", help="trainer to pull bundles from (env TRAINING_SERVER_URL)")
    source.add_argument("--bundle-dir", help="read bundles from this directory instead (env LATENCY_BUNDLE_DIR)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    overrides = {"host": args.host, "port": args.port, "training_server_url": args.training_url,
                 "bundle_dir": args.bundle_dir}
    settings = PredictorSettings.from_env(**overrides)
    if args.training_url:
        settings = settings.model_copy(update={"bundle_dir": None})
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, loop="uvloop", http="httptools",
                access_log=False, log_level=settings.log_level.lower(), workers=1,
                timeout_keep_alive=settings.keepalive_timeout_sec)


if __name__ == "__main__":
    main()
