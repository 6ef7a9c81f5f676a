"""Helpers for the offline deploy/ checks: render kustomizations, validate against pinned schemas, navigate.

Everything here is offline: `kubectl kustomize` (kustomize built into kubectl) renders; built-in kinds validate
against the Kubernetes JSON schemas shipped by the `kubernetes-validate` wheel (strict variant, version pinned
below); Kueue / KEDA / Prometheus-operator kinds validate against the schemas vendored under deploy/schemas/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = DEPLOY / "schemas"

# The Kubernetes API version our manifests target (the oldest we support; KEDA 2.16 / Kueue 0.10+ need >= 1.29).
K8S_SCHEMA_VERSION = "v1.31.0"
NAMESPACE = "latency-router"
CLUSTER_DIR = "cluster"
OVERLAYS = ("overlays/sidecar", "overlays/standalone", "overlays/sim")
ALL_KUSTOMIZATIONS = (*OVERLAYS, CLUSTER_DIR)
RENDER_TIMEOUT_S = 60

# Flags each entry point documents (docs/internal-contracts.md); test_crosschecks also asks the real CLI.
SCRIPT_ROLES = {
    "latency-trainer": "trainer",
    "latency-predictor": "predictor",
    "latency-router": "router",
    "sim-pod": "sim",
}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def project_scripts() -> dict[str, str]:
    return dict(pyproject()["project"]["scripts"])


def kubectl_path() -> str:
    """$KUBECTL, else kubectl on PATH, else one installed next to the venv's python (e.g. by the Makefile)."""
    candidates = [os.environ.get("KUBECTL"), shutil.which("kubectl"), str(Path(sys.executable).parent / "kubectl")]
    for path in candidates:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail("kubectl not found ($KUBECTL, PATH, or next to the venv's python): the deploy/ checks render with "
                "`kubectl kustomize` (see deploy/README.md 'Validating offline' for how to install it)", pytrace=False)


def render(kustomization: str) -> list[dict[str, Any]]:
    proc = subprocess.run([kubectl_path(), "kustomize", str(DEPLOY / kustomization)], capture_output=True,
                          text=True, timeout=RENDER_TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"kubectl kustomize deploy/{kustomization} failed:\n{proc.stderr}"
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d is not None]
    assert docs, f"deploy/{kustomization} rendered nothing"
    return docs


# ---------------------------------------------------------------------------------------------------- schemas


@cache
def _k8s_registry() -> tuple[Path, Registry]:
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"{K8S_SCHEMA_VERSION}-local-strict"
    directory = Path(str(root))
    assert directory.is_dir(), f"kubernetes-validate has no schemas for {K8S_SCHEMA_VERSION} at {directory}"
    defs = json.loads((directory / "_definitions.json").read_text())
    return directory, Resource.from_contents(defs) @ Registry()


def _builtin_schema_file(api_version: str, kind: str) -> Path:
    directory, _ = _k8s_registry()
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # apps/v1 -> apps-v1, v1 -> v1
    return directory / f"{kind.lower()}-{group_version}.json"


def _crd_schema_file(api_version: str, kind: str) -> Path | None:
    if "/" not in api_version:
        return None
    group, version = api_version.split("/", 1)
    path = SCHEMAS / group / f"{kind.lower()}_{version}.json"
    return path if path.is_file() else None


@cache
def validator_for(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """Strict validator for one kind: vendored CRD schema if we have one, else the built-in Kubernetes schema."""
    crd = _crd_schema_file(api_version, kind)
    if crd is not None:
        schema = json.loads(crd.read_text())
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    builtin = _builtin_schema_file(api_version, kind)
    if not builtin.is_file():
        pytest.fail(f"no schema for {kind} ({api_version}): not a Kubernetes {K8S_SCHEMA_VERSION} kind and not "
                    f"vendored under deploy/schemas/", pytrace=False)
    schema = json.loads(builtin.read_text())
    _, registry = _k8s_registry()
    return jsonschema.Draft202012Validator(schema, registry=Resource.from_contents(schema) @ registry)


# ---------------------------------------------------------------------------------------------------- quantities

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_FACTOR = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value: str | int | float) -> float:
    """Kubernetes quantity -> float (cores or bytes). Only the suffixes we use; anything else is a test failure."""
    match = _QUANTITY.match(str(value))
    assert match, f"unsupported/invalid quantity {value!r}"
    return float(match.group(1)) * _FACTOR[match.group(2)]


# ---------------------------------------------------------------------------------------------------- model


@dataclass
class Container:
    workload: dict[str, Any]
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def command(self) -> list[str]:
        return [str(c) for c in self.spec.get("command", [])]

    @property
    def args(self) -> list[str]:
        return [str(a) for a in self.spec.get("args", [])]

    @property
    def script(self) -> str | None:
        return self.command[0] if self.command else None

    @property
    def role(self) -> str:
        if self.script in SCRIPT_ROLES:
            return SCRIPT_ROLES[self.script]
        return "vllm" if "vllm/vllm-openai" in str(self.spec.get("image")) else "unknown"

    @property
    def pod_labels(self) -> dict[str, str]:
        return dict(self.workload["spec"]["template"]["metadata"].get("labels", {}))

    @property
    def pod_spec(self) -> dict[str, Any]:
        return dict(self.workload["spec"]["template"]["spec"])

    @property
    def pool(self) -> str:
        """Pool served: the pod's pool label (one pool per pod), else the container-name suffix (sidecars)."""
        label = self.pod_labels.get("latency-router/pool")
        if label:
            return label
        suffix = self.name.rsplit("-", 1)[-1]
        assert suffix in ("short", "long"), f"cannot tell the pool of container {self.name}"
        return suffix

    def flag(self, name: str) -> str | None:
        args = self.args
        for i, arg in enumerate(args):
            if arg == name:
                assert i + 1 < len(args), f"{self.name}: {name} without a value"
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None

    def port_number(self, ref: str | int) -> int:
        """Resolve a port (number or name) against this container's declared ports; fail if it is not declared."""
        for port in self.spec.get("ports", []):
            if ref in (port["containerPort"], port.get("name")) or str(ref) == str(port["containerPort"]):
                return int(port["containerPort"])
        raise AssertionError(f"container {self.name} declares no port {ref!r}")


@dataclass
class Rendered:
    name: str
    objects: list[dict[str, Any]]
    index: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for obj in self.objects:
            key = (obj["kind"], obj["metadata"]["name"])
            assert key not in self.index, f"{self.name}: duplicate {key}"
            self.index[key] = obj

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        assert (kind, name) in self.index, f"{self.name}: no {kind}/{name} (have {sorted(self.index)})"
        return self.index[(kind, name)]

    def workloads(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in ("Deployment", "StatefulSet")]

    def containers(self) -> list[Container]:
        return [Container(w, c) for w in self.workloads() for c in w["spec"]["template"]["spec"]["containers"]]

    def by_role(self, role: str) -> list[Container]:
        return [c for c in self.containers() if c.role == role]

    def configmap_by_generated_name(self, name: str) -> dict[str, Any]:
        return self.get("ConfigMap", name)

    def env_of(self, container: Container) -> dict[str, str | None]:
        """Every environment variable the manifests set on a container (direct, envFrom ConfigMap). Secret-backed
        values are None (the value is not in the manifests)."""
        env: dict[str, str | None] = {}
        for source in container.spec.get("envFrom", []):
            assert "configMapRef" in source, f"{container.name}: envFrom only from ConfigMaps (got {source})"
            cm = self.get("ConfigMap", source["configMapRef"]["name"])
            prefix = source.get("prefix", "")
            env.update({prefix + k: str(v) for k, v in cm.get("data", {}).items()})
        for var in container.spec.get("env", []):
            env[var["name"]] = var.get("value")
        return env

    def services_selecting(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        return [s for s in self.of_kind("Service")
                if s["spec"].get("selector") and all(labels.get(k) == v for k, v in s["spec"]["selector"].items())]

    def pods_selected_by(self, selector: dict[str, str]) -> list[dict[str, Any]]:
        return [w for w in self.workloads()
                if all(w["spec"]["template"]["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
