"""Resource figures come from measurements: BENCHMARKS.md carries a machine-readable sizing line, e.g.

    <!-- sizing: trainer_rss_mb=250 predictor_rss_mb=95 router_rss_mb=140 -->

(values in MiB, the peak RSS each benchmark measured; the lead adds it when merging bench/results/*/RESULTS-*.md). Every
container of a role must request at least that much memory and be limited to at least 1.5x it. deploy/README.md's
"Sizing" table must show the same requests/limits as deploy/components/sizing/sizing.yaml (the one place they live).
"""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_manifests import DEPLOY, OVERLAYS, REPO, Rendered, quantity

BENCHMARKS = REPO / "BENCHMARKS.md"
ROLES = ("trainer", "predictor", "router")
HEADROOM = 1.5
_SIZING_LINE = re.compile(r"<!--\s*sizing:\s*(.*?)\s*-->")


def measured_rss_mib() -> dict[str, float]:
    if not BENCHMARKS.is_file():
        pytest.fail(f"{BENCHMARKS} is missing: resource limits must be checked against measured RSS. Add a line "
                    "`<!-- sizing: trainer_rss_mb=N predictor_rss_mb=N router_rss_mb=N -->` (MiB) to it.",
                    pytrace=False)
    lines = _SIZING_LINE.findall(BENCHMARKS.read_text())
    if len(lines) != 1:
        pytest.fail(f"BENCHMARKS.md must contain exactly one `<!-- sizing: ... -->` line (found {len(lines)})",
                    pytrace=False)
    pairs = dict(item.split("=", 1) for item in lines[0].split())
    figures = {}
    for role in ROLES:
        key = f"{role}_rss_mb"
        if key not in pairs:
            pytest.fail(f"BENCHMARKS.md sizing line lacks {key}=<MiB>", pytrace=False)
        figures[role] = float(pairs[key])
        assert figures[role] > 0, key
    return figures


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_memory_follows_measured_rss(rendered: dict[str, Rendered], overlay: str) -> None:
    rss = measured_rss_mib()
    for role in ROLES:
        containers = rendered[overlay].by_role(role)
        assert containers, f"{overlay}: no {role}"
        for c in containers:
            request = quantity(c.spec["resources"]["requests"]["memory"]) / 2**20
            limit = quantity(c.spec["resources"]["limits"]["memory"]) / 2**20
            assert request >= rss[role], f"{overlay}: {c.name} requests {request:g} MiB < measured RSS {rss[role]:g}"
            assert limit >= HEADROOM * rss[role], (
                f"{overlay}: {c.name} memory limit {limit:g} MiB < {HEADROOM} x measured RSS {rss[role]:g} MiB")


def test_sizing_lives_in_one_place_and_the_readme_shows_it() -> None:
    sizing = yaml.safe_load((DEPLOY / "components" / "sizing" / "sizing.yaml").read_text())["spec"]
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("## Sizing", 1)[1].split("\n## ", 1)[0]
    for role in ROLES:
        rows = [line for line in section.splitlines() if line.startswith(f"| {role} ")]
        assert len(rows) == 1, f"deploy/README.md Sizing table needs one row for {role}"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        want = [sizing[role]["requests"]["cpu"], sizing[role]["requests"]["memory"],
                sizing[role]["limits"]["cpu"], sizing[role]["limits"]["memory"]]
        assert cells[1:5] == want, f"README Sizing row for {role} {cells[1:5]} != sizing.yaml {want}"
        assert "BENCHMARKS.md" in cells[5], f"README Sizing row for {role} must cite BENCHMARKS.md"


def test_every_role_is_sized_by_the_component(rendered: dict[str, Rendered]) -> None:
    sizing = yaml.safe_load((DEPLOY / "components" / "sizing" / "sizing.yaml").read_text())["spec"]
    for overlay in OVERLAYS:
        for role in ROLES:
            for c in rendered[overlay].by_role(role):
                assert c.spec["resources"] == sizing[role], f"{overlay}: {c.name} not sized by components/sizing"
