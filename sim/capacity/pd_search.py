"""Fewest GPUs meeting the joint TTFT P99 + TPOT P99 SLO, aggregated and disaggregated, at equal GPUs.

Every trial is one replay of the window on a fresh cluster (:mod:`sim.capacity.pd_space`), judged by
:func:`sim.capacity.joint.judge_joint`; trials are memoised per pod tuple.

- **Aggregated**: the smallest ``n`` that passes, galloping from the load-based guess and bisecting
  (:func:`sim.capacity.gallop.smallest_ok`; assumes the test is monotone in ``n``).
- **P/D at n pods**: TPOT is the decode pods' (more of them: a smaller batch per step), so it is taken as
  monotone in ``D``; TTFT is not monotone in either: too few prefill pods queue the prompts, too few decode
  pods make the handed-over requests wait for KV blocks (one decode pod under 25 prefill pods: P99 TTFT
  330 s). So: bisect the fewest decode pods ``D`` in ``[1, n-1]`` whose P99 TPOT passes — every other pod
  prefills, the most TTFT capacity TPOT allows — and ``n`` passes iff that split's TTFT passes too, or, when
  its TTFT misses, the split with one decode pod more (block waits). The trials log every split measured.
- **P/D**: the smallest ``n`` whose best split passes, galloping from the aggregated answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.capacity.gallop import Search, smallest_ok
from sim.capacity.guess import guess_pods
from sim.capacity.joint import JointSlo, JointVerdict, judge_joint
from sim.capacity.pd_space import PdSpace, Pods, label
from sim.capacity.workload import Window
from sim.engine.errors import SimError
from sim.replay.runner import run_policy

Log = Callable[[str], None]


class TrialBudgetSpent(SimError):
    """``--max-trials`` replays ran before the comparison finished."""


@dataclass(frozen=True)
class Trial:
    pods: Pods
    gpus: int
    verdict: JointVerdict
    extra: dict[str, Any] = field(default_factory=dict)
    """Summary figures of the replay: ``disaggregated_share``, ``kv_transfer_ms``, ``cpu_s``."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pods": list(self.pods), "label": label(self.pods), "gpus": self.gpus,
                               **self.verdict.as_dict(), **self.extra}
        if len(self.pods) == 2:
            out["prefill_pods"], out["decode_pods"] = self.pods
        return out


class PdCapacitySearch:
    def __init__(self, space: PdSpace, window: Window, slo: JointSlo, seed: int, log: Log,
                 max_trials: int = 60) -> None:
        self.space, self.window, self.slo, self.seed, self.log = space, window, slo, seed, log
        self.max_trials = max_trials
        self.trials: dict[Pods, Trial] = {}

    # -- one replay ---------------------------------------------------------------------------
    def measure(self, pods: Pods) -> Trial:
        if pods in self.trials:
            return self.trials[pods]
        if len(self.trials) >= self.max_trials:
            raise TrialBudgetSpent(f"--max-trials {self.max_trials} reached before the comparison finished")
        trial = self._replay(pods)
        self.trials[pods] = trial
        return trial

    def _replay(self, pods: Pods) -> Trial:
        policy, options = self.space.policy_of(pods)
        t0 = time.perf_counter()
        summary, result = run_policy(self.space.cluster(pods), self.window.items, policy, self.seed,
                                     options=options, slo_ttft_ms=self.slo.ttft_ms)
        verdict = judge_joint(result.records[self.window.judged_from:], self.slo)
        extra = {"cpu_s": summary.get("cpu_s"), "wall_s": round(time.perf_counter() - t0, 2)}
        for key in ("disaggregated_share", "kv_transfer_ms"):
            if key in summary:
                extra[key] = summary[key]
        trial = Trial(pods, sum(pods) * self.space.gpus_per_pod, verdict, extra)
        v = verdict
        self.log(f"{policy:<22} {label(pods):<9} {trial.gpus:>4} GPUs: P99 TTFT {_ms(v.p99_ttft_ms)}, "
                 f"P99 TPOT {_ms(v.p99_tpot_ms, 1)} -> {'ok' if v.ok else 'miss'} ({extra['cpu_s']} CPU-s)")
        return trial

    # -- searches -----------------------------------------------------------------------------
    def aggregated(self) -> Trial | None:
        """The fewest aggregated pods that pass (None: not within ``max_pods``)."""
        guess = guess_pods(self.window.items[self.window.judged_from:], self.space.engine())
        n = _smallest(smallest_ok(guess, self.space.max_pods), lambda k: self.measure((k,)).verdict.ok)
        return None if n is None else self.trials[(n,)]

    def best_split(self, n: int) -> Trial | None:
        """A passing split of ``n`` pods: the fewest decode pods whose TPOT passes, the rest prefill (or one
        decode pod more, when the first fails TTFT by its block waits); None when neither passes."""
        if n < 2:
            return None
        lo, hi = 0, n - 1
        if not self.measure((1, n - 1)).verdict.tpot_ok:
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.measure((n - mid, mid)).verdict.tpot_ok:
                hi = mid
            else:
                lo = mid
        for d in (hi, hi + 1):
            if d < n:
                trial = self.measure((n - d, d))
                if trial.verdict.ok:
                    return trial
        return None

    def disaggregated(self, start: int) -> Trial | None:
        """The fewest pods (and their split) that pass disaggregated, galloping from ``start``."""
        best: dict[int, Trial] = {}

        def passes(n: int) -> bool:
            found = self.best_split(n)
            if found is not None:
                best[n] = found
            return found is not None

        n = _smallest(smallest_ok(max(start, 2), self.space.max_pods), passes)
        return None if n is None else best[n]

    def curve(self) -> list[dict[str, Any]]:
        """Every trial, by GPUs then pods (for the plot and the JSON)."""
        return [t.as_dict() for t in sorted(self.trials.values(), key=lambda t: (t.gpus, len(t.pods), t.pods))]


def _smallest(search: Search, test: Callable[[int], bool]) -> int | None:
    try:
        n = next(search)
        while True:
            n = search.send(test(n))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _ms(v: float, digits: int = 0) -> str:
    return f"{v:.{digits}f} ms" if v != float("inf") else "inf"
