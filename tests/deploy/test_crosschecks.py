"""Cross-checks between the rendered manifests and the code: commands, flags, env vars, ports, URLs, queues, scalers.

These catch what a schema cannot: a container running a command the package does not install, an env var no
settings class reads, a probe on a port nobody listens on, a router pointed at the wrong pool's predictor.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from deploy_manifests import (
    NAMESPACE,
    OVERLAYS,
    REPO,
    Container,
    Rendered,
    project_scripts,
    pyproject,
    quantity,
)
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from router_client.config import RouterConfig, split_dns_target
from shared.predictor_settings import PredictorSettings
from shared.trainer_settings import TrainerSettings

SETTINGS: dict[str, type[BaseSettings]] = {"trainer": TrainerSettings, "predictor": PredictorSettings}
ROLE_PORT_ENV = {"trainer": "TRAINING_PORT", "predictor": "PREDICT_PORT"}
HELP_TIMEOUT_S = 60


def router_env_names() -> set[str]:
    """router_client has no settings class: its CLI reads a few env vars as flag defaults (its __main__.py)."""
    source = (REPO / "router_client" / "__main__.py").read_text()
    return set(re.findall(r"""env(?:iron)?\.get\(["']([A-Z][A-Z0-9_]*)["']""", source))


def env_names(settings: type[BaseSettings]) -> set[str]:
    """The environment variable names a settings class reads: each field's validation alias(es)."""
    names: set[str] = set()
    for name, info in settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(c for c in alias.choices if isinstance(c, str))
        elif isinstance(alias, str):
            names.add(alias)
        else:
            raise AssertionError(f"{settings.__name__}.{name} has no env alias")
    return names


def ours(overlay: Rendered) -> list[Container]:
    return [c for c in overlay.containers() if c.script is not None]


# ---------------------------------------------------------------------------------------------- commands, flags


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_command_is_a_packaged_entry_point(rendered: dict[str, Rendered], overlay: str) -> None:
    scripts = project_scripts()
    for c in rendered[overlay].containers():
        if c.role == "vllm":
            assert not c.command, f"{c.name}: vLLM runs its image's entry point; set args only"
            continue
        assert c.command, f"{overlay}: container {c.name} has no command"
        assert c.script in scripts, f"{overlay}: {c.name} runs {c.script!r}, not in [project.scripts] {sorted(scripts)}"
        assert c.role != "unknown", c.name


def _cli_flags(script: str) -> set[str]:
    """Flags the real CLI accepts, from its --help (run in a subprocess via the pyproject entry point)."""
    module, func = project_scripts()[script].split(":")
    code = f"import sys; sys.argv = [{script!r}, '--help']; from {module} import {func} as m; sys.exit(m())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HELP_TIMEOUT_S,
                          cwd=REPO, check=False)
    assert proc.returncode == 0, f"`{script} --help` failed (is {module} written yet?):\n{proc.stderr[-2000:]}"
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", proc.stdout))


@pytest.mark.parametrize("script", ["latency-trainer", "latency-predictor", "latency-router", "sim-pod"])
def test_container_flags_are_accepted_by_the_real_cli(rendered: dict[str, Rendered], script: str) -> None:
    used = {a.split("=", 1)[0] for r in rendered.values() for c in r.containers() if c.script == script
            for a in c.args if a.startswith("--")}
    assert used, f"no container runs {script}"
    missing = used - _cli_flags(script)
    assert not missing, f"{script} does not accept {sorted(missing)} (its --help)"


# ---------------------------------------------------------------------------------------------- environment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_env_var_is_read_by_the_settings(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for c in ours(r):
        env = r.env_of(c)
        if c.role in SETTINGS:
            unknown = set(env) - env_names(SETTINGS[c.role])
            assert not unknown, f"{overlay}: {c.name} sets {sorted(unknown)}, read by no {c.role} setting"
        elif c.role == "router":
            unknown = set(env) - router_env_names()
            assert not unknown, f"{overlay}: {c.name} sets {sorted(unknown)}, which router_client does not read"
        else:
            assert not env, f"{overlay}: {c.name} ({c.role}) sets env {sorted(env)}, which nothing reads"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_env_values_parse_with_the_real_settings(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for c in ours(r):
        if c.role not in SETTINGS:
            continue
        literal = {k: v for k, v in r.env_of(c).items() if v is not None}
        settings = SETTINGS[c.role].model_validate(literal)  # raises on a value the server would refuse at start-up
        assert getattr(settings, "model_type", None) == "xgboost"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_optional_and_keyed_by_the_env_name(rendered: dict[str, Rendered], overlay: str) -> None:
    for c in ours(rendered[overlay]):
        for var in c.spec.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref is None:
                continue
            assert ref["name"] == "latency-secrets" and ref.get("optional") is True, (c.name, var)
            assert ref["key"] == var["name"], f"{c.name}: secret key {ref['key']} feeds {var['name']}"
            assert var["name"] == "LATENCY_BUNDLE_HMAC_KEY", var["name"]  # tokens: files (tests/deploy/test_trust.py)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_trainer_and_predictor_of_a_pool_agree_on_shared_settings(rendered: dict[str, Rendered],
                                                                  overlay: str) -> None:
    r = rendered[overlay]
    common = env_names(TrainerSettings) & env_names(PredictorSettings)
    for pool in ("short", "long"):
        trainers = [c for c in r.by_role("trainer") if c.pool == pool]
        predictors = [c for c in r.by_role("predictor") if c.pool == pool]
        assert len(trainers) == 1, f"{overlay}: pool {pool} needs exactly one trainer"
        assert predictors, f"{overlay}: pool {pool} has no predictor"
        want = {k: v for k, v in r.env_of(trainers[0]).items() if k in common}
        assert "LATENCY_MODEL_TYPE" in want and "LATENCY_BUNDLE_HMAC_KEY" in want
        for p in predictors:
            got = {k: v for k, v in r.env_of(p).items() if k in common}
            assert got == want, f"{overlay}: {p.name} and {trainers[0].name} disagree on shared settings"


# ---------------------------------------------------------------------------------------------- ports, probes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ports_flags_probes_agree(rendered: dict[str, Rendered], overlay: str) -> None:
    for c in rendered[overlay].containers():
        ports = c.spec.get("ports", [])
        assert len(ports) == 1, f"{c.name}: one port per server"
        listen = int(ports[0]["containerPort"])
        assert int(c.flag("--port") or -1) == listen, f"{overlay}: {c.name} --port differs from its containerPort"
        assert c.flag("--host") == "0.0.0.0", f"{c.name}: must listen on all interfaces in a pod"
        env_port = rendered[overlay].env_of(c).get(ROLE_PORT_ENV.get(c.role, ""), None)
        assert env_port in (None, str(listen)), f"{c.name}: {ROLE_PORT_ENV[c.role]}={env_port} != {listen}"
        paths = {"vllm": ("/health", "/health"), "sim": ("/health", "/health")}.get(c.role, ("/healthz", "/readyz"))
        for kind, path in (("livenessProbe", paths[0]), ("readinessProbe", paths[1])):
            probe = c.spec.get(kind)
            assert probe and "httpGet" in probe, f"{overlay}: {c.name} lacks an HTTP {kind}"
            assert probe["httpGet"]["path"] == path, f"{c.name} {kind} path {probe['httpGet']['path']} != {path}"
            assert c.port_number(probe["httpGet"]["port"]) == listen, f"{c.name} {kind} probes another port"
        if "startupProbe" in c.spec:
            assert c.port_number(c.spec["startupProbe"]["httpGet"]["port"]) == listen


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ports_are_unique_within_a_pod(rendered: dict[str, Rendered], overlay: str) -> None:
    for w in rendered[overlay].workloads():
        numbers = [p["containerPort"] for c in w["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
        names = [p["name"] for c in w["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
        assert len(set(numbers)) == len(numbers) and len(set(names)) == len(names), w["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_pods_and_target_declared_ports(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for svc in r.of_kind("Service"):
        pods = r.pods_selected_by(svc["spec"]["selector"])
        assert len(pods) == 1, f"{overlay}: Service {svc['metadata']['name']} selects {len(pods)} workloads"
        containers = [Container(pods[0], c) for c in pods[0]["spec"]["template"]["spec"]["containers"]]
        for port in svc["spec"]["ports"]:
            hits = [c for c in containers if any(port["targetPort"] in (p["containerPort"], p["name"])
                                                 for p in c.spec["ports"])]
            assert len(hits) == 1, f"{overlay}: Service {svc['metadata']['name']} targets undeclared {port}"


def _resolve(r: Rendered, url: str, caller: Container) -> Container:
    """The container a URL used inside caller's pod reaches: 127.0.0.1 -> same pod; a name -> that Service."""
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.hostname, url
    if parts.hostname in ("127.0.0.1", "localhost"):
        assert parts.port is not None, f"{url}: give the sidecar port explicitly"
        same_pod = [Container(caller.workload, c) for c in caller.pod_spec["containers"]]
        hits = [c for c in same_pod if any(p["containerPort"] == parts.port for p in c.spec["ports"])]
        assert len(hits) == 1, f"{url}: no container in {caller.workload['metadata']['name']} listens there"
        return hits[0]
    svc = r.get("Service", parts.hostname)
    port = parts.port or 80
    spec_ports = [p for p in svc["spec"]["ports"] if p["port"] == port]
    assert spec_ports, f"{url}: Service {parts.hostname} has no port {port}"
    (pod,) = r.pods_selected_by(svc["spec"]["selector"])
    for spec in pod["spec"]["template"]["spec"]["containers"]:
        target = Container(pod, spec)
        if any(spec_ports[0]["targetPort"] in (p["containerPort"], p["name"]) for p in spec["ports"]):
            return target
    raise AssertionError(f"{url}: Service {parts.hostname} targets no declared container port")


DNS_TTL_S = 5.0
"""CoreDNS's default answer TTL for Services (its kubernetes plugin's ``ttl``)."""


def _pre_stop_sleep_s(engine: Container) -> float:
    """Seconds an engine keeps serving after it is told to stop (its ``preStop: exec: [sleep, N]``; 0 without)."""
    command = engine.spec.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    return float(command[1]) if len(command) == 2 and command[0] == "sleep" else 0.0


def _discovered(r: Rendered, dns: str) -> Container:
    """The engine container a router's ``discovery.dns`` (NAME:PORT) reaches: NAME must be a headless Service of
    the overlay's namespace (``svc``, ``svc.<namespace>``, ``svc.<namespace>.svc[.cluster.local]``) whose every
    address is a pod, and PORT one of its ports — which, a headless Service having no virtual port, must be the
    container port itself."""
    host, port = split_dns_target(dns)
    service, *domain = host.rstrip(".").split(".")
    assert domain in ([], [NAMESPACE], [NAMESPACE, "svc"], [NAMESPACE, "svc", "cluster", "local"]), (
        f"{dns}: not a Service name in namespace {NAMESPACE}")
    svc = r.get("Service", service)
    assert svc["spec"].get("clusterIP") == "None", f"{dns}: Service {service} is not headless (clusterIP: None)"
    assert not svc["spec"].get("publishNotReadyAddresses"), f"{dns}: Service {service} publishes unready pods"
    spec_ports = [p for p in svc["spec"]["ports"] if p["port"] == port]
    assert spec_ports, f"{dns}: Service {service} has no port {port}"
    (pod,) = r.pods_selected_by(svc["spec"]["selector"])
    for spec in pod["spec"]["template"]["spec"]["containers"]:
        target = Container(pod, spec)
        declared = [p for p in spec["ports"] if spec_ports[0]["targetPort"] in (p["containerPort"], p["name"])]
        if declared:
            assert declared[0]["containerPort"] == port, f"{dns}: pods listen on {declared[0]['containerPort']}"
            return target
    raise AssertionError(f"{dns}: Service {service} targets no declared container port")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_engine_services_are_headless(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for svc in r.of_kind("Service"):
        (workload,) = r.pods_selected_by(svc["spec"]["selector"])
        roles = {Container(workload, c).role for c in workload["spec"]["template"]["spec"]["containers"]}
        if roles & {"vllm", "sim"}:
            assert svc["spec"].get("clusterIP") == "None", f"{overlay}: {svc['metadata']['name']} must be headless"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_predictors_pull_from_their_own_pools_trainer(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for p in r.by_role("predictor"):
        url = p.flag("--training-url") or r.env_of(p).get("TRAINING_SERVER_URL")
        assert url, f"{p.name}: no --training-url / TRAINING_SERVER_URL"
        trainer = _resolve(r, url, p)
        assert trainer.role == "trainer" and trainer.pool == p.pool, f"{overlay}: {p.name} pulls from {trainer.name}"


def _router_config(r: Rendered, router: Container) -> dict:
    path = router.flag("--config")
    assert path, "router must be started with --config"
    volumes = {v["name"]: v for v in router.pod_spec["volumes"]}
    for mount in router.spec["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume and path.startswith(mount["mountPath"].rstrip("/") + "/"):
            key = path[len(mount["mountPath"].rstrip("/")) + 1:]
            return json.loads(r.get("ConfigMap", volume["configMap"]["name"])["data"][key])
    raise AssertionError(f"--config {path} is not a file of a mounted ConfigMap")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_router_config_points_each_pool_at_its_own_services(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for router in r.by_role("router"):
        config = _router_config(r, router)
        RouterConfig.parse(config)  # the router's own start-up validation (unknown keys fail)
        assert [p["name"] for p in config["pools"]] == ["short", "long"]
        for pool in config["pools"]:
            name = pool["name"]
            trainer = _resolve(r, pool["trainer_url"], router)
            assert (trainer.role, trainer.pool) == ("trainer", name), f"{overlay}: {name} trainer_url -> {trainer.name}"
            assert pool["predictor_urls"], name
            for url in pool["predictor_urls"]:
                predictor = _resolve(r, url, router)
                assert (predictor.role, predictor.pool) == ("predictor", name), f"{overlay}: {url} -> {predictor.name}"
            assert "pods" not in pool and "discovery" in pool, f"{overlay}: pool {name} must discover its pods"
            engine = _discovered(r, pool["discovery"]["dns"])
            assert engine.role in ("vllm", "sim") and engine.pool == name, f"{overlay}: {name} -> {engine.name}"
            max_len = engine.flag("--max-model-len")
            assert max_len is not None and int(max_len) == pool["max_context"], (
                f"{overlay}: pool {name} max_context {pool['max_context']} != {engine.name} --max-model-len")
            if engine.role == "sim":
                assert engine.flag("--pool") == name
            assert 0 < pool["discovery"]["refresh_s"] <= 10, f"{overlay}: {name} follows scaling too slowly"
            drain = _pre_stop_sleep_s(engine)
            assert drain >= pool["discovery"]["refresh_s"] + DNS_TTL_S + 2, (
                f"{overlay}: {engine.name} stops before the routers can have dropped it (preStop sleep {drain:g} s)")
            assert drain < engine.pod_spec["terminationGracePeriodSeconds"], engine.name


def test_pools_are_configured_short_and_long(rendered: dict[str, Rendered]) -> None:
    engines = {c.pool: c for c in rendered["overlays/sidecar"].by_role("vllm")}
    short, long = engines["short"], engines["long"]
    assert int(short.flag("--max-model-len") or 0) < int(long.flag("--max-model-len") or 0)
    assert int(short.flag("--max-num-seqs") or 0) > int(long.flag("--max-num-seqs") or 0)
    assert float(short.flag("--gpu-memory-utilization") or 1) < float(long.flag("--gpu-memory-utilization") or 0)
    for c in engines.values():
        assert c.spec["resources"]["limits"]["nvidia.com/gpu"] == 1


# ---------------------------------------------------------------------------------------------- state, replicas


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_trainers_have_their_own_durable_volume(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    claims: list[str] = []
    for t in r.by_role("trainer"):
        data_dir = t.flag("--data-dir") or r.env_of(t).get("LATENCY_DATA_DIR")
        volumes = {v["name"]: v for v in t.pod_spec["volumes"]}
        (mount,) = [m for m in t.spec["volumeMounts"] if m["mountPath"] == data_dir]
        claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
        claims.append(claim)
        pvc = r.get("PersistentVolumeClaim", claim)
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
        retention = float(r.env_of(t).get("LATENCY_RETENTION_MAX_BYTES") or TrainerSettings().retention_max_bytes)
        size = quantity(pvc["spec"]["resources"]["requests"]["storage"])
        assert size >= 2 * retention, f"{claim}: {size:.0f} B < 2 x retention {retention:.0f} B"
        spec = t.workload["spec"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate", (
            f"{overlay}: {t.workload['metadata']['name']} holds a single-writer volume")
    assert sorted(claims) == ["trainer-long-data", "trainer-short-data"], claims


def test_standalone_predictors_are_replicated(rendered: dict[str, Rendered]) -> None:
    r = rendered["overlays/standalone"]
    for p in r.by_role("predictor"):
        assert p.workload["spec"]["replicas"] >= 2, p.workload["metadata"]["name"]
        assert r.get("PodDisruptionBudget", p.workload["metadata"]["name"])["spec"]["minAvailable"] >= 1


# ---------------------------------------------------------------------------------------------- images, security


def test_images_are_pinned_and_ours_follows_the_package_version(rendered: dict[str, Rendered]) -> None:
    version = pyproject()["project"]["version"]
    for r in rendered.values():
        for c in r.containers():
            image = c.spec["image"]
            repo, _, tag = image.rpartition(":")
            assert repo and tag and tag != "latest" and "/" not in tag, f"{c.name}: image {image} not pinned"
            if c.script is not None:
                assert repo.endswith("/latency-router") and tag == version, f"{c.name}: {image} (want :{version})"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_our_pods_run_locked_down(rendered: dict[str, Rendered], overlay: str) -> None:
    for c in ours(rendered[overlay]):
        pod = c.pod_spec
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod.get("enableServiceLinks") is False, f"{c.name}: injected *_PORT vars could shadow our settings"
        sc = c.spec["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in c.spec.get("volumeMounts", [])}
        assert "/tmp" in mounts, f"{c.name}: read-only root needs a writable /tmp"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_and_limits(rendered: dict[str, Rendered], overlay: str) -> None:
    for c in rendered[overlay].containers():
        res = c.spec.get("resources", {})
        for key in ("cpu", "memory"):
            assert key in res.get("requests", {}), f"{overlay}: {c.name} has no {key} request"
        assert "memory" in res.get("limits", {}), f"{overlay}: {c.name} has no memory limit"
        assert quantity(res["limits"]["memory"]) >= quantity(res["requests"]["memory"]), c.name
        if "cpu" in res.get("limits", {}):
            assert quantity(res["limits"]["cpu"]) >= quantity(res["requests"]["cpu"]), c.name


# ---------------------------------------------------------------------------------------------- Kueue, KEDA


def _scaled_max(r: Rendered, deployment: str) -> int:
    targets = [s for s in r.of_kind("ScaledObject") if s["spec"]["scaleTargetRef"]["name"] == deployment]
    assert len(targets) == 1, f"{r.name}: Deployment {deployment} needs exactly one ScaledObject"
    return int(targets[0]["spec"]["maxReplicaCount"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kueue_queues_resolve_and_quota_covers_the_pools(rendered: dict[str, Rendered], cluster: Rendered,
                                                         overlay: str) -> None:
    r = rendered[overlay]
    managed = [w for w in r.workloads() if "kueue.x-k8s.io/queue-name" in w["metadata"].get("labels", {})]
    assert sorted(w["metadata"]["name"] for w in managed) == ["vllm-long", "vllm-short"]
    demand: dict[tuple[str, str], float] = {}
    for w in managed:
        queue = r.get("LocalQueue", w["metadata"]["labels"]["kueue.x-k8s.io/queue-name"])
        assert queue["metadata"]["name"] == w["metadata"]["name"], "one LocalQueue per pool, named after it"
        cq = cluster.get("ClusterQueue", queue["spec"]["clusterQueue"])
        assert cq["spec"]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": NAMESPACE}
        covered = {res for group in cq["spec"]["resourceGroups"] for res in group["coveredResources"]}
        replicas = _scaled_max(r, w["metadata"]["name"])
        for spec in w["spec"]["template"]["spec"]["containers"]:
            for res, amount in spec["resources"]["requests"].items():
                assert res in covered, f"{w['metadata']['name']} requests {res}, not covered by its ClusterQueue"
                key = (cq["metadata"]["name"], res)
                demand[key] = demand.get(key, 0.0) + replicas * quantity(amount)
    for (cq_name, res), need in demand.items():
        quota = sum(quantity(q["nominalQuota"]) for group in cluster.get("ClusterQueue", cq_name)["spec"]
                    ["resourceGroups"] for flavor in group["flavors"] for q in flavor["resources"] if q["name"] == res)
        assert need <= quota, f"{overlay}: pools at KEDA max need {need:g} {res}, {cq_name} quota is {quota:g}"
    flavors = {f["metadata"]["name"] for f in cluster.of_kind("ResourceFlavor")}
    for cq in cluster.of_kind("ClusterQueue"):
        for group in cq["spec"]["resourceGroups"]:
            assert {f["name"] for f in group["flavors"]} <= flavors


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_scales_each_pool_on_its_own_queue_depth(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for so in r.of_kind("ScaledObject"):
        deployment = r.get("Deployment", so["spec"]["scaleTargetRef"]["name"])
        pool = deployment["spec"]["template"]["metadata"]["labels"]["latency-router/pool"]
        spec = so["spec"]
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], so["metadata"]["name"]
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        matchers = dict(re.findall(r'(\w+)="([^"]*)"', query))
        assert query.startswith("sum(vllm:num_requests_waiting{"), query
        assert matchers == {"namespace": NAMESPACE, "pool": pool}, f"{so['metadata']['name']}: {query}"
        assert float(trigger["metadata"]["threshold"]) > 0


# ---------------------------------------------------------------------------------------------- monitoring


def _scraped_ports(r: Rendered, w: dict) -> set[str]:
    labels = w["spec"]["template"]["metadata"]["labels"]
    names: set[str] = set()
    for pm in r.of_kind("PodMonitor"):
        sel = pm["spec"]["selector"]
        ok = all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items()) and all(
            labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", []) if e["operator"] == "In")
        if ok:
            names.update(e["port"] for e in pm["spec"]["podMetricsEndpoints"])
    for sm in r.of_kind("ServiceMonitor"):
        want = sm["spec"]["selector"]["matchLabels"]
        for svc in r.services_selecting(labels):
            if all(svc["metadata"].get("labels", {}).get(k) == v for k, v in want.items()):
                svc_ports = {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}
                names.update(str(svc_ports[e["port"]]) for e in sm["spec"]["endpoints"] if e["port"] in svc_ports)
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_scrapes_every_server(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    for w in r.workloads():
        declared = {p["name"] for c in w["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        missing = declared - _scraped_ports(r, w)
        assert not missing, f"{overlay}: ports {sorted(missing)} of {w['metadata']['name']} are not scraped"
