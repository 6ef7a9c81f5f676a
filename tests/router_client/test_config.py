"""RouterConfig: the JSON file format, defaults, and start-up failures."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from router_client.config import RouterConfig
from router_client.errors import RouterConfigError
from router_client.router import Router

BASE = {"pools": [{"name": "short", "pods": ["http://127.0.0.1:9000"], "max_context": 4096,
                   "trainer_url": "http://127.0.0.1:8000", "predictor_urls": ["http://127.0.0.1:8001"]},
                  {"name": "long", "pods": ["http://127.0.0.1:9100"], "max_context": 32768}],
        "predictor_timeout_ms": 5}


def test_load_file_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "router.json"
    path.write_bytes(orjson.dumps(BASE))
    cfg = RouterConfig.load(path)
    assert cfg.pool("short").max_context == 4096 and cfg.pool("long").predictor_urls == []
    assert cfg.classifier.output_threshold_tokens == 512 and cfg.classifier.total_threshold_tokens == 2048
    assert [f.name for f in cfg.scheduler.filters] == ["prefix-affinity", "slo-headroom"]
    assert cfg.coalesce_window_ms == 0.0 and cfg.max_coalesced_rows == 10000


BAD = [
    ("unknown top-level key", {**BASE, "predictor_timeout": 5}, "predictor_timeout"),
    ("unknown pool key", {"pools": [{**BASE["pools"][0], "urls": []}]}, "urls"),
    ("unknown classifier key", {**BASE, "classifier": {"threshold": 3}}, "threshold"),
    ("no pools", {"pools": []}, "pools"),
    ("pool without pods", {"pools": [{"name": "a", "pods": []}]}, "pods"),
    ("duplicate pool names", {"pools": [BASE["pools"][0], BASE["pools"][0]]}, "duplicate"),
    ("too many coalesced rows", {**BASE, "max_coalesced_rows": 20000}, "max_coalesced_rows"),
    ("pod_classes naming a stranger", {"pools": [{**BASE["pools"][0], "pod_classes": {"http://x:1": "h100"}}]},
     "pod_classes names pods not in pods: \\['http://x:1'\\]"),
    ("pod_class not a string", {"pools": [{**BASE["pools"][0], "pod_class": 3}]}, "pod_class"),
    ("pods and discovery", {"pools": [{**BASE["pools"][0], "discovery": {"dns": "vllm:8000"}}]},
     "pool 'short': give pods or discovery, not both"),
    ("neither pods nor discovery", {"pools": [{"name": "a"}]},
     "pool 'a': give pods \\(at least one URL\\) or discovery"),
    *((f"discovery.dns {dns!r}", {"pools": [{"name": "a", "discovery": {"dns": dns}}]},
       "discovery.dns must be NAME:PORT")
      for dns in ("vllm-short", "vllm-short:", ":8000", "vllm short:8000", "vllm-short:0", "vllm-short:65536",
                  "vllm-short:80a", "-vllm:8000", "a..b:8000", "[zz]:8000", "[10.0.0.1]:8000", "http://vllm:8000")),
    ("discovery.refresh_s 0", {"pools": [{"name": "a", "discovery": {"dns": "vllm:8000", "refresh_s": 0}}]},
     "refresh_s"),
    ("unknown discovery key", {"pools": [{"name": "a", "discovery": {"dns": "vllm:8000", "ttl": 3}}]}, "ttl"),
    ("pod_classes with discovery", {"pools": [{"name": "a", "discovery": {"dns": "vllm:8000"},
                                               "pod_classes": {"http://10.0.0.1:8000": "h100"}}]},
     "pod_classes is keyed by pod URL"),
    ("two pools discover one name", {"pools": [{"name": "a", "discovery": {"dns": "vllm:8000"}},
                                               {"name": "b", "discovery": {"dns": "vllm:8000"}}]},
     "two pools discover the same name"),
]


@pytest.mark.parametrize(("name", "data", "needle"), BAD, ids=[b[0] for b in BAD])
def test_invalid_config_fails(name: str, data: dict, needle: str) -> None:
    with pytest.raises(RouterConfigError, match=needle):
        RouterConfig.parse(data)


@pytest.mark.parametrize(("dns", "host", "port"), [
    ("vllm-short.latency-router.svc.cluster.local:8000", "vllm-short.latency-router.svc.cluster.local", 8000),
    ("vllm-short.latency-router.svc.cluster.local.:8000", "vllm-short.latency-router.svc.cluster.local.", 8000),
    ("localhost:1", "localhost", 1), ("10.0.0.7:65535", "10.0.0.7", 65535), ("[fd00::7]:8000", "fd00::7", 8000),
])
def test_discovery_config(dns: str, host: str, port: int) -> None:
    cfg = RouterConfig.parse({"pools": [{"name": "short", "discovery": {"dns": dns}, "pod_class": "a100"}]})
    discovery = cfg.pool("short").discovery
    assert discovery is not None and (discovery.host, discovery.port, discovery.refresh_s) == (host, port, 5.0)
    assert cfg.pool("short").pods == [] and cfg.pool("short").class_of("http://10.0.0.1:8000") == "a100"


def test_unknown_plugin_fails_when_the_router_is_built() -> None:
    cfg = RouterConfig.parse({**BASE, "scheduler": {"picker": {"name": "roulette"}}})
    with pytest.raises(RouterConfigError, match="unknown picker plugin 'roulette'"):
        Router(cfg)


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(RouterConfigError, match="cannot read"):
        RouterConfig.load(tmp_path / "bad.json")
