"""``latency-trainer`` / ``python -m trainer``: --host --port --data-dir (env: TRAINING_HOST, ...)."""

from __future__ import annotations

import argparse
import logging

import uvicorn

from shared.trainer_settings import TrainerSettings
from trainer.app import create_app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="latency-trainer", description="Latency training server (llm-d wire).")
    parser.add_argument("--host", help="bind address (env TRAINING_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="bind port (env TRAINING_PORT, default 8000)")
    parser.add_argument("--data-dir", dest="data_dir", help="durable log + bundles (env LATENCY_DATA_DIR)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = TrainerSettings.from_env(host=args.host, port=args.port, data_dir=args.data_dir)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                access_log=False)


if __name__ == "__main__":
    main()
