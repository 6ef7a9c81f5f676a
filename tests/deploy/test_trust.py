"""The trust boundary in deploy/: tokens come from the `latency-tokens` Secret as mounted files (never plain env),
every writer holds the token its server checks, and NetworkPolicies let only routers reach trainers and
predictors (predictors reach trainers; Prometheus scrapes everything) — evaluated on the rendered manifests."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from deploy_manifests import NAMESPACE, OVERLAYS, Container, Rendered

SECRET = "latency-tokens"
TOKEN_FILES = {"LATENCY_WRITE_TOKEN_FILE": "write-token", "LATENCY_READ_TOKEN_FILE": "read-token"}
CLIENT = {"latency-router/client": "true"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
OTHER_NS = {"kubernetes.io/metadata.name": "somewhere-else"}
OURS = {"kubernetes.io/metadata.name": NAMESPACE}


def secret_file(c: Container, path: str) -> tuple[str, str]:
    """(Secret name, key) of the file ``path`` in container ``c``, from its volume mounts."""
    volumes = {v["name"]: v for v in c.pod_spec.get("volumes", [])}
    for mount in c.spec.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and "secret" in volumes[mount["name"]]:
            secret = volumes[mount["name"]]["secret"]
            assert mount.get("readOnly") is True and not secret.get("optional"), (c.name, mount)
            return secret["secretName"], path[len(prefix):]
    raise AssertionError(f"{c.name}: {path} is not in a mounted Secret")


def router_config(r: Rendered, router: Container) -> dict[str, Any]:
    path = router.flag("--config")
    assert path is not None
    volumes = {v["name"]: v for v in router.pod_spec["volumes"]}
    for mount in router.spec["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume and path.startswith(mount["mountPath"].rstrip("/") + "/"):
            data = r.get("ConfigMap", volume["configMap"]["name"])["data"]
            return dict(json.loads(data[path.rsplit("/", 1)[1]]))
    raise AssertionError("router config not mounted")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_read_both_tokens_from_the_secret(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    servers = r.by_role("trainer") + r.by_role("predictor")
    assert servers
    for c in servers:
        env = r.env_of(c)
        assert "LATENCY_WRITE_TOKEN" not in env and "LATENCY_READ_TOKEN" not in env, f"{c.name}: token in env"
        for var, key in TOKEN_FILES.items():
            assert var in env, f"{overlay}: {c.name} lacks {var}"
            assert secret_file(c, str(env[var])) == (SECRET, key), (c.name, var)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_routers_send_the_write_token(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for router in r.by_role("router"):
        reporter = router_config(r, router)["reporter"]
        assert secret_file(router, reporter["trainer_token_file"]) == (SECRET, TOKEN_FILES["LATENCY_WRITE_TOKEN_FILE"])
        assert router.pod_labels.get("latency-router/client") == "true"


# ------------------------------------------------------------------------------------------ NetworkPolicy

def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels selectors are evaluated here: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _port_matches(rule: dict[str, Any], port: dict[str, Any]) -> bool:
    ports = rule.get("ports")
    return not ports or any(p["port"] in (port["containerPort"], port.get("name")) for p in ports)


def _peer_matches(peer: dict[str, Any], pod_labels: dict[str, str] | None, ns_labels: dict[str, str]) -> bool:
    if "namespaceSelector" in peer and not _selects(peer["namespaceSelector"], ns_labels):
        return False
    if "namespaceSelector" not in peer and ns_labels != OURS:
        return False
    if "podSelector" in peer:
        return pod_labels is not None and _selects(peer["podSelector"], pod_labels)
    return True


def allowed(r: Rendered, target: dict[str, str], port: dict[str, Any], source: dict[str, str] | None,
            ns_labels: dict[str, str] = OURS) -> bool:
    """Whether a pod (labels ``source``; None = not a pod, e.g. an external client) in a namespace labelled
    ``ns_labels`` may open ``port`` on a pod labelled ``target`` under the overlay's NetworkPolicies."""
    policies = [p for p in r.of_kind("NetworkPolicy") if _selects(p["spec"]["podSelector"], target)
                and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            if _port_matches(rule, port) and (not peers or any(_peer_matches(p, source, ns_labels) for p in peers)):
                return True
    return False


def _server_ports(r: Rendered, role: str) -> list[tuple[Container, dict[str, Any]]]:
    return [(c, port) for c in r.by_role(role) for port in c.spec.get("ports", [])]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_routers_predictors_and_prometheus_reach_the_servers(rendered: dict[str, Rendered],
                                                                 overlay: str) -> None:
    r = rendered[overlay]
    router_labels = r.by_role("router")[0].pod_labels
    stranger = {"app": "curious"}
    for role in ("trainer", "predictor"):
        for c, port in _server_ports(r, role):
            where = f"{overlay}: {c.name}:{port['containerPort']}"
            assert allowed(r, c.pod_labels, port, None, MONITORING), f"{where}: Prometheus cannot scrape"
            assert not allowed(r, c.pod_labels, port, stranger), f"{where}: open to any pod"
            assert not allowed(r, c.pod_labels, port, None, OTHER_NS), f"{where}: open to other namespaces"
            assert not allowed(r, c.pod_labels, port, {**stranger, "app.kubernetes.io/component": "vllm"})
            if c.pod_labels != router_labels:  # standalone: its own pods, reached by routers over the network
                assert allowed(r, c.pod_labels, port, router_labels), f"{where}: routers cannot reach it"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_predictor_reaches_its_trainer(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for p in r.by_role("predictor"):
        url = urlsplit(p.flag("--training-url") or "")
        if url.hostname == "127.0.0.1":  # same pod
            assert any(t.workload is p.workload for t in r.by_role("trainer"))
            continue
        (service,) = [s for s in r.of_kind("Service") if s["metadata"]["name"] == url.hostname]
        (trainer,) = [t for t in r.by_role("trainer") if _selects({"matchLabels": service["spec"]["selector"]},
                                                                  t.pod_labels)]
        for port in trainer.spec["ports"]:
            assert allowed(r, trainer.pod_labels, port, p.pod_labels), f"{p.name} cannot pull from {trainer.name}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_router_port_stays_open_to_clients(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for router in r.by_role("router"):
        proxy = [p for p in router.spec["ports"] if p["containerPort"] == 8080]
        assert proxy and allowed(r, router.pod_labels, proxy[0], None, OTHER_NS)
