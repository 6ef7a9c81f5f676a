"""Extrapolation past the training window: served p90 ÷ true p90 at 1×, 2×, 4× and 8× the largest load trained on.

For each synthetic family (``bench.trainer.families``) a fresh trainer + predictor pair of each source tree
(``bench.trainer.servers``) is fed training rows whose work (queued prefill for TTFT, decode tokens for TPOT)
stays below a cap, then asked over HTTP (``POST /predict/bulk/strict``) for the p90 of rows at k × the cap. The
figure per family × target × multiple is the median of the per-row ratio served ÷ true p90 (and its 10th–90th
percentile); a multiple ≥ 2 passes when that median is within ``BAND``. ``--against REV`` runs the same rows through
another revision's servers (a detached ``git worktree``, removed afterwards) in the same run.

    python -m bench.trainer.extrapolation --against a28d46d --out bench/results/trainer/extrapolation.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import results as results_file
from bench.common.paths import REPO, RESULTS
from bench.trainer.families import FAMILIES, MULTIPLES, TARGETS, Family, Sample, probe_sample, train_sample
from bench.trainer.servers import Pair, PairSettings, Tree

BAND = (0.7, 1.4)
DEFAULT_OUT = RESULTS / "trainer" / "extrapolation.json"
CHECKOUT = "checkout"
"""The tree name of this working tree (HEAD plus whatever is not committed: ``figures.git.modified``)."""


@dataclass(frozen=True)
class Config:
    families: tuple[str, ...]
    train_rows: int
    """Training rows per target (TTFT and TPOT each)."""
    test_rows: int
    """Test rows per target and multiple."""
    seed: int
    pair: PairSettings


@dataclass(frozen=True)
class Data:
    train: dict[str, Sample]
    test: dict[str, Sample]

    def training_rows(self, rng: np.random.Generator) -> list[dict[str, Any]]:
        """Every target's training rows, shuffled together (as a pool's router would send them)."""
        rows = [row for s in self.train.values() for row in s.rows]
        return [rows[i] for i in rng.permutation(len(rows))]


def make_data(family: Family, config: Config) -> Data:
    """The same rows for every tree: the generator is seeded by the family's name and the run's seed."""
    rng = np.random.default_rng([config.seed, zlib.crc32(family.name.encode())])
    return Data({t: train_sample(family, target, config.train_rows, rng) for t, target in TARGETS.items()},
                {t: probe_sample(family, target, config.test_rows, rng) for t, target in TARGETS.items()})


def summarize(ratios: np.ndarray, multiple: np.ndarray) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for k in MULTIPLES:
        r = ratios[multiple == k]
        p10, median, p90 = (float(v) for v in np.percentile(r, [10, 50, 90]))
        out[str(k)] = {"median": round(median, 3), "p10": round(p10, 3), "p90": round(p90, 3), "n": int(len(r)),
                       "in_band": None if k < 2 else bool(BAND[0] <= median <= BAND[1])}
    return out


def measure(tree: Tree, family: Family, data: Data, config: Config, workdir: Path) -> list[dict[str, Any]]:
    """One fresh trainer + predictor of ``tree`` trained on ``data``: a result per target."""
    with Pair(tree, workdir, config.pair) as pair:
        pair.start(config.train_rows)
        pair.post(data.training_rows(np.random.default_rng(config.seed)))
        served = pair.wait_trained({t: config.train_rows for t in TARGETS})
        results = []
        for t, test in data.test.items():
            predicted = np.array([p[f"{t}_ms"] for p in pair.predict(test.rows)], dtype=np.float64)
            figures = summarize(predicted / test.p90, test.multiple)
            results.append({"tree": tree.name, "family": family.name, "target": t,
                            "served": {"version": served.version, "rows": served.rows[t], "waited_s": served.waited_s,
                                       "candidate": served.candidates.get(t, "")},
                            "true_p90_ms": {str(k): round(float(np.median(test.p90[test.multiple == k])), 1)
                                            for k in MULTIPLES},
                            "multiples": figures,
                            "pass": all(f["in_band"] for f in figures.values() if f["in_band"] is not None)})
    return results


def _git(*args: str) -> str:
    """Read-only git (``GIT_OPTIONAL_LOCKS=0``: ``status`` does not refresh the index) or the worktree commands."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.rstrip()


@contextmanager
def trees(revs: Sequence[str], into: Path) -> Iterator[list[Tree]]:
    """This checkout (its working tree, uncommitted edits included), then a detached ``git worktree`` of each of
    ``revs`` (removed on exit)."""
    made: list[Path] = []
    out = [Tree(CHECKOUT, REPO, _git("rev-parse", "HEAD"))]
    try:
        for rev in revs:
            commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
            path = into / f"tree-{commit[:12]}"
            _git("worktree", "add", "--detach", str(path), commit)
            made.append(path)
            out.append(Tree(rev, path, commit))
        yield out
    finally:
        for path in made:
            _git("worktree", "remove", "--force", str(path))


def run(config: Config, revs: Sequence[str], out: Path) -> dict[str, Any]:
    """Measure every family on every tree; write the result envelope to ``out`` and return it."""
    results: list[dict[str, Any]] = []
    modified = [line[3:] for line in _git("status", "--porcelain").splitlines()]
    with (results_file.run("extrapolation") as recording,
          tempfile.TemporaryDirectory(prefix="bench-extrapolation-") as tmp, trees(revs, Path(tmp)) as measured):
        for name in config.families:
            family = FAMILIES[name]
            data = make_data(family, config)
            for i, tree in enumerate(measured):
                results += measure(tree, family, data, config, Path(tmp) / f"{name}-{i}")
        figures = {"trees": [{"name": t.name, "commit": t.commit} for t in measured],
                   "git": {"modified": modified, "head_at_end": _git("rev-parse", "HEAD")}, "results": results}
        return recording.write(out, settings(config), figures)


def settings(config: Config) -> dict[str, Any]:
    return {"families": {n: FAMILIES[n].summary for n in config.families},
            "train_rows_per_target": config.train_rows, "test_rows_per_target_and_multiple": config.test_rows,
            "seed": config.seed, "multiples": list(MULTIPLES), "band": list(BAND),
            "caps": {t: target.cap for t, target in TARGETS.items()}, "pair": asdict(config.pair)}


def _cell(figure: dict[str, Any]) -> str:
    miss = " ✗" if figure["in_band"] is False else ""
    return f"{figure['median']:.2f} ({figure['p10']:.2f}–{figure['p90']:.2f}){miss}"


def _trees(result: dict[str, Any]) -> str:
    edits = " + uncommitted edits" if result["figures"]["git"]["modified"] else ""
    return ", ".join(f"{t['name']} = {t['commit'][:7]}{edits if t['name'] == CHECKOUT else ''}"
                     for t in result["figures"]["trees"])


def markdown(result: dict[str, Any]) -> str:
    head = " | ".join(f"{k}×" for k in MULTIPLES)
    lines = [f"Served p90 ÷ true p90, median (10th–90th percentile) per row; band {BAND[0]}–{BAND[1]} at ≥ 2× "
             f"(✗ = outside). {result['machine']['cores']} cores, load {result['load_avg_before'][0]:.1f} → "
             f"{result['load_avg_after'][0]:.1f}, {result['wall_s']:.0f} s. Trees: {_trees(result)}.", "",
             f"| tree | family | target | {head} | ≥ 2× in band |", "|---|---|---|" + "--:|" * len(MULTIPLES) + "---|"]
    wanted = result["settings"]["train_rows_per_target"]
    for r in result["figures"]["results"]:
        cells = " | ".join(_cell(r["multiples"][str(k)]) for k in MULTIPLES)
        rows = r["served"]["rows"]
        trained = "" if rows >= wanted else " (the prior: not trained)" if not rows else f" (trained on {rows} rows)"
        lines.append(f"| {r['tree']} | {r['family']} | {r['target']}{trained} | {cells} | "
                     f"{'yes' if r['pass'] else 'no'} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.trainer.extrapolation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    parser.add_argument("--train-rows", type=int, default=3000, help="training rows per target")
    parser.add_argument("--test-rows", type=int, default=300, help="test rows per target and multiple")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retrain-interval", type=float, default=2.0, help="trainer retrain interval (s)")
    parser.add_argument("--against", action="append", default=[], metavar="REV",
                        help="also measure this git revision's trainer + predictor (repeatable)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    families = tuple(f for f in args.families.split(",") if f)
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    config = Config(families, args.train_rows, args.test_rows, args.seed,
                    PairSettings(retrain_interval_s=args.retrain_interval))
    result = run(config, args.against, args.out)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
