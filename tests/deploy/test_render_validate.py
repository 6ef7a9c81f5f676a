"""Every kustomization renders, and every rendered object validates offline against its pinned schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
from deploy_manifests import ALL_KUSTOMIZATIONS, DEPLOY, NAMESPACE, OVERLAYS, SCHEMAS, Rendered, validator_for

CRD_KINDS = {
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"), ("kueue.x-k8s.io/v1beta1", "LocalQueue"),
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"), ("keda.sh/v1alpha1", "ScaledObject"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"),
}
CLUSTER_SCOPED = {"Namespace", "ClusterQueue", "ResourceFlavor"}


@pytest.mark.parametrize("kustomization", ALL_KUSTOMIZATIONS)
def test_every_object_validates_against_its_schema(rendered: dict[str, Rendered], kustomization: str) -> None:
    problems = []
    for obj in rendered[kustomization].objects:
        validator = validator_for(obj["apiVersion"], obj["kind"])
        for error in validator.iter_errors(obj):
            path = ".".join(str(p) for p in error.absolute_path)
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {path}: {error.message[:300]}")
    assert not problems, "\n".join(problems)


def test_every_vendored_crd_kind_is_used_and_has_a_schema(rendered: dict[str, Rendered]) -> None:
    used = {(o["apiVersion"], o["kind"]) for r in rendered.values() for o in r.objects}
    for api_version, kind in CRD_KINDS:
        group, version = api_version.split("/")
        assert (SCHEMAS / group / f"{kind.lower()}_{version}.json").is_file(), f"schema for {kind} not vendored"
        assert (api_version, kind) in used, f"{kind} is vendored but no manifest uses it"


@pytest.mark.parametrize("api_version,kind", sorted(CRD_KINDS))
def test_vendored_schemas_are_strict(api_version: str, kind: str) -> None:
    """The vendored schemas must reject what the API server rejects: unknown fields and wrong types."""
    validator = validator_for(api_version, kind)
    minimal = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": {}}
    typo = {**minimal, "spec": {"definitelyNotAField": 1}}
    assert list(validator.iter_errors(typo)), f"{kind} schema accepts unknown spec fields"
    wrong_kind = {**minimal, "kind": kind + "X"}
    assert list(validator.iter_errors(wrong_kind)), f"{kind} schema accepts another kind"


def test_builtin_schema_is_strict() -> None:
    validator = validator_for("apps/v1", "Deployment")
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "imagee": "typo"}]}}}}
    assert list(validator.iter_errors(bad)), "built-in Deployment schema accepts an unknown container field"


def test_kueue_schema_catches_a_wrong_enum() -> None:
    validator = validator_for("kueue.x-k8s.io/v1beta1", "ClusterQueue")
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                            "metadata": {"name": "x"}, "spec": {"queueingStrategy": "Random"}})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_objects_are_namespaced_and_labelled(rendered: dict[str, Rendered], overlay: str) -> None:
    for obj in rendered[overlay].objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["kind"] not in CLUSTER_SCOPED, f"{overlay}: cluster-scoped {name} belongs in deploy/cluster"
        assert obj["metadata"].get("namespace") == NAMESPACE, f"{overlay}: {name} not in namespace {NAMESPACE}"
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "latency-router", name


def test_cluster_objects_are_cluster_scoped(rendered: dict[str, Rendered]) -> None:
    for obj in rendered["cluster"].objects:
        assert obj["kind"] in CLUSTER_SCOPED, f"namespaced {obj['kind']} in deploy/cluster"
        assert "namespace" not in obj["metadata"], f"{obj['kind']}/{obj['metadata']['name']} has a namespace"


def test_every_kustomization_dir_is_rendered() -> None:
    """A new overlay must be added to conftest.OVERLAYS, or it would ship unvalidated."""
    found = {str(p.parent.relative_to(DEPLOY)) for p in DEPLOY.rglob("kustomization.yaml")}
    components = {p for p in found if p.startswith("components/")}
    assert found - components - {"base"} == set(ALL_KUSTOMIZATIONS), found


def test_overlays_cover_the_topologies(rendered: dict[str, Rendered]) -> None:
    kinds = {name: {(o["kind"], o["metadata"]["name"]) for o in r.objects} for name, r in rendered.items()}
    sidecar = rendered["overlays/sidecar"].get("Deployment", "latency-router")
    names = [c["name"] for c in sidecar["spec"]["template"]["spec"]["containers"]]
    assert names == ["router", "trainer-short", "predictor-short", "trainer-long", "predictor-long"]
    for pool in ("short", "long"):
        for kind, name in (("Deployment", f"trainer-{pool}"), ("Deployment", f"predictor-{pool}"),
                           ("Service", f"trainer-{pool}"), ("Service", f"predictor-{pool}"),
                           ("PersistentVolumeClaim", f"trainer-{pool}-data")):
            assert (kind, name) in kinds["overlays/standalone"], (kind, name)
        for overlay in OVERLAYS:
            for kind in ("Deployment", "Service", "LocalQueue", "ScaledObject"):
                assert (kind, f"vllm-{pool}") in kinds[overlay], (overlay, kind, pool)


def test_router_config_is_valid_json(overlays: list[Rendered]) -> None:
    for r in overlays:
        router = r.by_role("router")
        assert router, f"{r.name}: no router"
        for c in router:
            volumes = {v["name"]: v for v in c.pod_spec["volumes"]}
            mounts = [m for m in c.spec["volumeMounts"] if "configMap" in volumes[m["name"]]]
            assert len(mounts) == 1, f"{r.name}: router must mount exactly one ConfigMap"
            cm = r.get("ConfigMap", volumes[mounts[0]["name"]]["configMap"]["name"])
            assert set(cm["data"]) == {"config.json"}
            json.loads(cm["data"]["config.json"])
