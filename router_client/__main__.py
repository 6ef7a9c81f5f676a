"""``python -m router_client`` / ``latency-router``: the OpenAI-compatible routing proxy.

    latency-router --host 0.0.0.0 --port 8080 --config router-config.json

Environment fallbacks: ``ROUTER_HOST``, ``ROUTER_PORT``, ``ROUTER_CONFIG``, ``ROUTER_KEEPALIVE_TIMEOUT_SEC``,
``LATENCY_LOG_LEVEL``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from router_client.config import RouterConfig
from router_client.errors import RouterConfigError
from router_client.proxy.app import create_app
from router_client.proxy.forwarding import ForwardSettings
from shared.keepalive import POD_MAX_IDLE_S, SERVER_KEEPALIVE_S


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(prog="latency-router", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=env.get("ROUTER_HOST", "0.0.0.0"), help="bind address")
    parser.add_argument("--port", type=int, default=int(env.get("ROUTER_PORT", "8080")), help="bind port")
    parser.add_argument("--config", default=env.get("ROUTER_CONFIG"), help="router config JSON file")
    parser.add_argument("--served-model-name", default=None,
                        help="answer /v1/models with this name instead of the pods' union")
    parser.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to connect to a pod")
    parser.add_argument("--pod-ca-file", default=None,
                        help="PEM CA bundle for https:// pods (default: the system trust store)")
    parser.add_argument("--keepalive-timeout", type=int,
                        default=env.get("ROUTER_KEEPALIVE_TIMEOUT_SEC", str(SERVER_KEEPALIVE_S)),
                        help="seconds an idle client connection is kept open (above the clients' idle timeout; "
                        "llm-d's Go client: 90)")
    parser.add_argument("--pod-max-idle", type=float, default=POD_MAX_IDLE_S,
                        help="seconds a kept-alive pod connection may idle before it is closed instead of reused "
                        "(below the pods' keep-alive timeout)")
    parser.add_argument("--log-level", default=env.get("LATENCY_LOG_LEVEL", "INFO"), help="Python log level")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("--config (or ROUTER_CONFIG) is required")
    if args.keepalive_timeout < 1 or args.pod_max_idle <= 0:
        parser.error("--keepalive-timeout must be >= 1 and --pod-max-idle > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = RouterConfig.load(args.config)
    except RouterConfigError as exc:
        print(f"latency-router: {exc.message}", file=sys.stderr)
        return 2
    settings = ForwardSettings(connect_timeout_s=args.connect_timeout, served_model_name=args.served_model_name,
                               pod_ca_file=args.pod_ca_file, pod_max_idle_s=args.pod_max_idle)
    app = create_app(config, settings)
    # http="httptools": streams are then written to the client from the pod connection's callback
    # (router_client/proxy/downstream.py); under h11 they would take the slower ASGI path
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), access_log=False,
                loop="auto", http="httptools", lifespan="on", timeout_graceful_shutdown=5,
                timeout_keep_alive=args.keepalive_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
