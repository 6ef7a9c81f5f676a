"""Mixed pools (groups of different presets in one pool), ``pod_class``, and the H100 Llama-3-8B preset."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sim.cluster import ClusterConfig, Decision, PodGroupSpec, PodSnapshot, PolicyContext, PolicyRegistry, PoolSpec
from sim.cluster.config_file import load_cluster_file
from sim.engine import ConfigError, EngineConfig, StepTimeModel
from sim.engine.hardware import LLAMA2_7B, LLAMA3_8B
from sim.replay import build_items, run_policy
from sim.workload import load_trace

MIXED = """
scrape_interval_s = 0.1
[[pools]]
name = "pod"
max_model_len = 4096
[[pools.groups]]
count = 2
preset = "llama3-8b-a100"
[[pools.groups]]
count = 2
preset = "llama3-8b-h100"
pod_class = "h100"
max_num_seqs = 128
"""


def test_cluster_file_with_groups(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MIXED)
    pools, extra = load_cluster_file(path)
    assert extra == {"scrape_interval_s": 0.1}
    cfg = ClusterConfig(pools=pools)
    plans = cfg.pods()
    assert [p.pod_id for p in plans] == ["pod-0", "pod-1", "pod-2", "pod-3"]
    assert [p.pod_class for p in plans] == ["llama3-8b-a100", "llama3-8b-a100", "h100", "h100"]
    assert [p.engine.gpu.name for p in plans] == ["A100-80G", "A100-80G", "H100-80G", "H100-80G"]
    assert {p.engine.max_model_len for p in plans} == {4096}  # pool-level key reaches every group
    assert [p.engine.max_num_seqs for p in plans] == [256, 256, 128, 128]
    assert {p.engine.model_name for p in plans} == {"meta-llama/Meta-Llama-3-8B-Instruct"}


@pytest.mark.parametrize(("text", "message"), [
    ('[[pools]]\nname = "p"\n[[pools.groups]]\ncount = 1\nmax_seqs = 3\n', "pool 'p' group 0: unknown key 'max_seqs'"),
    ('[[pools]]\nname = "p"\n[[pools.groups]]\npreset = "llama3-8b-h100"\n', "pool 'p' group 0: 'count' is required"),
    ('[[pools]]\nname = "p"\ncount = 2\n[[pools.groups]]\ncount = 2\n', "'count' / 'pod_class' go in each"),
    ('[[pools]]\nname = "p"\ngroups = []\n', "'groups' must be a non-empty list"),
    ('[[pools]]\nname = "p"\n[[pools.groups]]\ncount = 1\npreset = "tpu"\n', "pool 'p' group 0: unknown preset"),
    ('[[pools]]\nname = "p"\ncount = "4"\n', "pool 'p': 'count' must be int"),
    ('[[pools]]\nname = "p"\ncount = 1\nmax_model_len = 4096.5\n', "'max_model_len' must be int"),
    ('[[pools]]\nname = "p"\ncount = 1\n[[pools]]\nname = "p"\ncount = 1\n', "duplicate pool names"),
    ('scrape = 1\n[[pools]]\nname = "p"\ncount = 1\n', "unknown cluster key 'scrape'"),
])
def test_bad_cluster_files_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_cluster_file(path)


def test_h100_llama3_preset_scales_the_llama2_profile_by_linear_flops() -> None:
    ratio = LLAMA3_8B.linear_params_per_layer / LLAMA2_7B.linear_params_per_layer
    # 4096*(4096+2*1024) + 4096*4096 + 3*4096*14336 over 4096*(3*4096) + 4096*4096 + 3*4096*11008
    assert ratio == pytest.approx(218_103_808 / 202_375_168)
    h100_8b = StepTimeModel(EngineConfig.from_preset("llama3-8b-h100", noise_std=0.0))
    h100_7b = StepTimeModel(EngineConfig.from_preset("llama2-7b-h100", noise_std=0.0))
    for n in (64, 512, 2048):
        assert h100_8b.linear_ms[n] == pytest.approx(ratio * h100_7b.linear_ms[n], rel=0.005)
    a100 = StepTimeModel(EngineConfig.from_preset("llama3-8b-a100", noise_std=0.0))
    assert h100_8b.base_ms(512, 1, 512 * 256, 0) < 0.5 * a100.base_ms(512, 1, 512 * 256, 0)


class ClassRecorder:
    name = "class-recorder"

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        self.classes: set[str] = set()
        self._n = 0

    def choose(self, request: object, pods: Sequence[PodSnapshot]) -> Decision:
        self.classes.update(p.pod_class for p in pods)
        self._n += 1
        return Decision.route(pods[self._n % len(pods)].pod_id)

    def on_complete(self, completion: object) -> None:
        return None


def test_mixed_pool_h100_pods_have_lower_ttft_under_equal_load(shared_data: Path) -> None:
    items = build_items(load_trace(shared_data / "azure_llm_2023_conv.csv", rate_scale=6.0, limit=1500), seed=2)
    a100 = EngineConfig.from_preset("llama3-8b-a100")
    h100 = EngineConfig.from_preset("llama3-8b-h100")
    cfg = ClusterConfig(pools=(PoolSpec.mixed("pod", (PodGroupSpec(4, a100), PodGroupSpec(4, h100))),))
    registry = PolicyRegistry()
    holder: list[ClassRecorder] = []
    registry.register("class-recorder", lambda ctx: holder.append(ClassRecorder(ctx)) or holder[-1])
    summary, result = run_policy(cfg, items, "class-recorder", registry=registry)
    assert holder[0].classes == {"llama3-8b-a100", "llama3-8b-h100"}
    assert holder[0].ctx.pod_classes["pod-7"] == "llama3-8b-h100"
    shares = summary["per_pod_share"]
    assert abs(sum(shares[f"pod-{i}"] for i in range(4)) - 0.5) < 0.01  # equal load per class
    assert summary["per_pod"]["pod-5"]["pod_class"] == "llama3-8b-h100"

    def mean_ttft(cls: str) -> float:
        values = [r.ttft_ms for r in result.records if r.pod_class == cls and r.ttft_ms is not None]
        return sum(values) / len(values)

    assert mean_ttft("llama3-8b-h100") < 0.7 * mean_ttft("llama3-8b-a100")
