"""docker-compose.yml smoke test without a Docker engine.

Every service is started on the host from the entrypoint + command + environment the compose file
gives it (console scripts from this venv), with service host names rewritten to 127.0.0.1, each
container port mapped to a free loopback port, named volumes mapped to temp dirs and bind-mounted
files copied with the same rewriting. Then: all healthchecks pass, requests through the router
reach pods of both pools, samples reach the trainers, predictors are ready. Everything is torn
down at the end.
"""

from __future__ import annotations

import functools
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # demo/ is a top-level folder, not an installed package
    sys.path.insert(0, str(REPO))

from demo.procs import LOOPBACK, PortAllocator, ProcessSet  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

COMPOSE = REPO / "docker-compose.yml"
BIN = Path(sys.executable).parent
_HEALTH_URL = re.compile(r"http://(?:127\.0\.0\.1|localhost):(\d+)(/[\w/.-]*)")


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    volumes: list[str]
    health_port: int | None = None
    health_path: str = "/"
    ports: dict[int, int] = field(default_factory=dict)
    """container port → host port."""
    paths: dict[str, str] = field(default_factory=dict)
    """container path → host path (volumes are per service: two trainers never share a data dir)."""


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _env(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return dict(item.split("=", 1) for item in value or [])


def _listen_ports(argv: list[str], env: dict[str, str]) -> list[int]:
    port = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"), None)
    if port is None:
        port = next((v for k, v in env.items() if k.endswith("_PORT")), None)
    if port is None:
        return []
    count = int(next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--count"), "1"))
    return [int(port) + i for i in range(count)]


def load_services() -> tuple[dict[str, Any], dict[str, Service]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = {}
    for name, spec in doc["services"].items():
        svc = Service(name, _as_list(spec.get("entrypoint")) + _as_list(spec.get("command")),
                      _env(spec.get("environment")), [str(v) for v in spec.get("volumes", [])])
        test = " ".join(_as_list((spec.get("healthcheck") or {}).get("test")))
        match = _HEALTH_URL.search(test)
        if match:
            svc.health_port, svc.health_path = int(match.group(1)), match.group(2)
        services[name] = svc
    return doc, services


class Rewriter:
    """Maps ``http://<service>:<port>`` and container paths to their host equivalents."""

    def __init__(self, services: dict[str, Service]) -> None:
        self.services = services

    def url(self, match: re.Match[str]) -> str:
        svc = self.services.get(match.group(1))
        if svc is None or int(match.group(2)) not in svc.ports:
            return match.group(0)
        return f"http://{LOOPBACK}:{svc.ports[int(match.group(2))]}"

    def text(self, value: str, svc: Service | None = None) -> str:
        value = re.sub(r"http://([\w.-]+):(\d+)", self.url, value)
        for container, host in (svc.paths if svc else {}).items():
            if value == container or value.startswith(container + "/"):
                value = host + value[len(container):]
        return LOOPBACK if value == "0.0.0.0" else value


def plan(services: dict[str, Service], tmp: Path) -> Rewriter:
    allocator = PortAllocator()
    for svc in services.values():
        ports = _listen_ports(svc.argv, svc.env)
        if ports:
            base = allocator.take(len(ports))
            svc.ports = {p: base + i for i, p in enumerate(ports)}
    rewriter = Rewriter(services)
    for svc in services.values():
        for volume in svc.volumes:
            src, dst = volume.split(":")[:2]
            if src.startswith((".", "/")):
                host = tmp / f"{svc.name}-{Path(src).name}"
                host.write_text(rewriter.text(json_text(REPO / src)))
            else:
                host = tmp / src
                host.mkdir(exist_ok=True)
            svc.paths[dst] = str(host)
    return rewriter


def _with_host_ports(argv: list[str], svc: Service) -> list[str]:
    return [str(svc.ports[int(a)]) if i and argv[i - 1] == "--port" else a for i, a in enumerate(argv)]


def json_text(path: Path) -> str:
    return orjson.dumps(orjson.loads(path.read_bytes())).decode()


@pytest.fixture(scope="module")
def compose_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], dict[str, Service],
                                                                              Rewriter]]:
    tmp = tmp_path_factory.mktemp("compose")
    doc, services = load_services()
    rewriter = plan(services, tmp)
    with ProcessSet(tmp / "logs", cwd=tmp) as procs:
        for svc in services.values():
            argv = _with_host_ports([rewriter.text(a, svc) for a in svc.argv], svc)
            exe = BIN / argv[0]
            assert exe.exists(), f"{svc.name}: {argv[0]} is not a console script of this project"
            env = {k: str(svc.ports[int(v)]) if k.endswith("_PORT") and int(v) in svc.ports else rewriter.text(v, svc)
                   for k, v in svc.env.items()}
            health = [f"http://{LOOPBACK}:{svc.ports[svc.health_port]}{svc.health_path}"] if svc.health_port else []
            procs.start(svc.name, [str(exe), *argv[1:]], env, health)
        procs.wait_healthy(45)
        yield doc, services, rewriter


def _samples(client: httpx.Client, trainer_url: str) -> int:
    status = client.get(trainer_url + "/data/status").json()
    return int(status["training_data"]["total_samples"] + status["test_data"]["total_samples"])


def test_every_service_is_built_from_the_repo_image() -> None:
    doc, services = load_services()
    for name, spec in doc["services"].items():
        assert spec.get("build") == ".", name
        assert services[name].health_port is not None, f"{name} has no HTTP healthcheck"
        for dep in spec.get("depends_on", {}):
            assert dep in doc["services"], f"{name} depends on unknown {dep}"
    config = orjson.loads((REPO / "compose" / "router-config.json").read_bytes())
    hosts = {re.match(r"http://([\w.-]+):", url).group(1)  # type: ignore[union-attr]
             for pool in config["pools"] for url in [*pool["pods"], pool["trainer_url"], *pool["predictor_urls"]]}
    assert hosts <= set(doc["services"]), hosts - set(doc["services"])


def test_services_talk_to_each_other(compose_stack: tuple[dict[str, Any], dict[str, Service], Rewriter]) -> None:
    _, services, rewriter = compose_stack
    router = services["router"]
    base = f"http://{LOOPBACK}:{router.ports[8080]}"
    config_copy = next(Path(p) for svc in services.values() for c, p in svc.paths.items() if c.endswith("config.json"))
    config = orjson.loads(config_copy.read_bytes())
    pool_pods = {pool["name"]: set(pool["pods"]) for pool in config["pools"]}
    seen: dict[str, set[str]] = {name: set() for name in pool_pods}
    with httpx.Client(timeout=30) as client:
        for i in range(8):
            long = i % 4 == 3
            body = {"model": "m", "prompt": [1] * (6000 if long else 200), "max_tokens": 4, "stream": i % 2 == 0}
            resp = client.post(base + "/v1/completions", json=body)
            assert resp.status_code == 200, resp.text
            pool, pod = resp.headers["x-routed-pool"], resp.headers["x-routed-pod"]
            assert pod in pool_pods[pool]
            seen[pool].add(pod)
        assert all(seen.values()), seen
        for pool in config["pools"]:
            assert client.get(pool["predictor_urls"][0] + "/readyz").status_code == 200
            wait_for(functools.partial(_samples, client, pool["trainer_url"]), timeout=15, interval=0.2,
                     what=f"samples reach the {pool['name']} trainer")
