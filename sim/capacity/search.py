"""The capacity search: the fewest GPUs (Σ pods × TP) whose replay meets the SLO.

Assumes the SLO test is monotone in every pool's pod count. Two stages:

1. **Coarse** (on the coarse slice, see :mod:`sim.capacity.workload`; on the whole trace when there is
   none), for every threshold and TP degree: per pool the smallest count that passes when only that
   pool's misses count (a lower bound; gallop + bisection, :mod:`sim.capacity.gallop`; with two pools
   the two pools' searches share trials), then for two pools a grid search upwards from the lower
   bounds over both counts and both TP degrees. The cheapest passing (threshold, TP, counts) wins.
2. **Full** (whole trace), at the winner's threshold and TP: a grid search around the coarse counts
   (one pod below them upwards; lower while the cheapest pass uses a pool's lowest count), then the
   answer is confirmed by a replay of exactly that configuration.

A grid search measures the grid's diagonal (one trial gives one point per pool, see
:mod:`sim.capacity.trial`), judges every combination of measured points, and extends the grid until
no unmeasured combination could be cheaper than the cheapest pass.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sim.capacity.gallop import Search, smallest_ok
from sim.capacity.guess import guess_pods
from sim.capacity.slo import Slo, Verdict
from sim.capacity.space import SearchSpace, Threshold
from sim.capacity.trial import Counts, Log, TrialResult, TrialRunner, merged_verdict
from sim.capacity.workload import Window, Workload
from sim.engine.errors import ConfigError, SimError

CONFIRM_ATTEMPTS = 3
Key = tuple[int, int]
"""(pool index, TP degree) of a lower-bound search."""


class SearchExhausted(SimError):
    """The trial budget ran out before an answer was proven."""


class NoCapacity(SimError):
    """Nothing up to ``--max-pods`` per pool meets the SLO."""


@dataclass(frozen=True)
class Found:
    threshold: Threshold
    counts: Counts
    gpus: int
    verdict: Verdict


@dataclass
class SearchResult:
    space: SearchSpace
    found: Found
    confirm: TrialResult
    coarse: Found | None
    trials: list[dict[str, object]]


class CapacitySearch:
    def __init__(self, space: SearchSpace, workload: Workload, slo: Slo, seed: int, log: Log,
                 max_trials: int = 60) -> None:
        self.space = space
        self.workload = workload
        self.runner = TrialRunner(space, slo, seed, log)
        self.max_trials = max_trials
        self.log = log

    def run(self) -> SearchResult:
        first = self.workload.coarse or self.workload.full
        coarse = self._coarse(first)
        if self.workload.coarse is None:
            found = coarse
        else:
            tps = tuple(tp for tp, _ in coarse.counts)
            lo = tuple(max(n - 1, 1) for _, n in coarse.counts)
            found = self._grid(self.workload.full, coarse.threshold, tps, lo, tuple(n for _, n in coarse.counts),
                               (1,) * len(tps), "full")
        confirm = self._confirm(found)
        return SearchResult(self.space, found, confirm, coarse if self.workload.coarse else None, self.runner.trials)

    # -- stage 1 -----------------------------------------------------------------------------
    def _coarse(self, window: Window) -> Found:
        best: Found | None = None
        for threshold in self.space.thresholds:
            bounds = self._lower_bounds(window, threshold)
            for tps in itertools.product(*(sorted(b) for b in bounds)):
                lo = tuple(bounds[i][tp] for i, tp in enumerate(tps))
                if len(tps) == 1:
                    verdict = merged_verdict(self.runner, window, threshold, ((tps[0], lo[0]),))
                    found = Found(threshold, ((tps[0], lo[0]),), tps[0] * lo[0], verdict) if verdict else None
                else:
                    found = self._grid(window, threshold, tps, lo, lo, lo, "coarse")
                if found is not None and (best is None or _better(found, best)):
                    best = found
        if best is None:
            raise NoCapacity(f"no configuration up to --max-pods {self.space.max_pods} per pool meets the SLO "
                             f"on the {window.name} window")
        return best

    def _lower_bounds(self, window: Window, threshold: Threshold) -> list[dict[int, int]]:
        """Per pool, per valid TP: the smallest count passing when only that pool's misses count."""
        self._valid: list[list[int]] = [[] for _ in self.space.pools]
        guesses: dict[Key, int] = {}
        for i, shape in enumerate(self.space.pools):
            for tp in shape.tps():
                guess = self._guess(window, threshold, i, tp)
                if guess is not None:
                    self._valid[i].append(tp)
                    guesses[(i, tp)] = guess
            if not self._valid[i]:
                raise ConfigError(f"pool {shape.name!r}: no valid tensor_parallel_size among {list(shape.tps())} "
                                  f"({threshold.label})")
        bounds: list[dict[int, int]] = [{} for _ in self.space.pools]
        # One pool: TP degrees one after the other, each capped below the GPUs of the best so far.
        # Several pools: every (pool, TP) search at once, sharing trials.
        groups = [[key] for key in guesses] if len(self.space.pools) == 1 else [list(guesses)]
        for group in groups:
            searches = {key: smallest_ok(guesses[key], self._cap(key, bounds)) for key in group}
            pending = {key: next(gen) for key, gen in searches.items()}
            while pending:
                self._resolve_known(window, threshold, searches, pending, bounds)
                if pending:
                    self._trial_for(window, threshold, pending, bounds)
        for i, b in enumerate(bounds):
            if not b:
                raise NoCapacity(f"pool {self.space.pools[i].name!r}: no TP option meets the SLO with at most "
                                 f"--max-pods {self.space.max_pods} pods")
        return bounds

    def _cap(self, key: Key, bounds: list[dict[int, int]]) -> int:
        """Pods worth testing: for one pool, fewer GPUs than the best TP degree found so far."""
        i, tp = key
        cap = self.space.max_pods
        if len(self.space.pools) == 1 and bounds[i]:
            best = min(t * n for t, n in bounds[i].items())
            cap = min(cap, (best - 1) // tp)
        return max(cap, 1)

    def _resolve_known(self, window: Window, threshold: Threshold, searches: dict[Key, Search],
                       pending: dict[Key, int], bounds: list[dict[int, int]]) -> None:
        """Feed every search whose pending count can be judged from known points (repeat until none can)."""
        progress = True
        while progress:
            progress = False
            for (i, tp), n in list(pending.items()):
                counts = self._counts_with(i, tp, n)
                verdict = merged_verdict(self.runner, window, threshold, counts, alone=i)
                if verdict is None:
                    continue
                progress = True
                try:
                    pending[(i, tp)] = searches[(i, tp)].send(verdict.ok)
                except StopIteration as stop:
                    del pending[(i, tp)]
                    if stop.value is not None:
                        bounds[i][tp] = stop.value

    def _trial_for(self, window: Window, threshold: Threshold, pending: dict[Key, int],
                   bounds: list[dict[int, int]]) -> None:
        """One trial serving a pending request of every pool (a pool without one runs at a bound it passed)."""
        counts = []
        for i, shape in enumerate(self.space.pools):
            want = next(((tp, n) for (j, tp), n in pending.items() if j == i), None)
            if want is None:
                if not bounds[i]:
                    raise NoCapacity(f"pool {shape.name!r}: no TP option meets the SLO with at most --max-pods "
                                     f"{self.space.max_pods} pods ({threshold.label})")
                want = min(bounds[i].items(), key=lambda kv: kv[0] * kv[1])
            counts.append(want)
        before = len(self.runner.points)
        self._trial(window, threshold, tuple(counts), "bound")
        if len(self.runner.points) == before:
            raise SearchExhausted(f"a trial at {counts} taught the search nothing ({threshold.label})")

    def _counts_with(self, i: int, tp: int, n: int) -> Counts:
        """Pool ``i`` at (tp, n); the others at placeholders (only for lower-bound tests, which ignore them)."""
        return tuple((tp, n) if j == i else (0, 0) for j in range(len(self.space.pools)))

    def _guess(self, window: Window, threshold: Threshold, i: int, tp: int) -> int | None:
        """A starting count, or None when pool ``i`` cannot run at ``tp`` (e.g. its KV cache is too small)."""
        shape = self.space.pools[i]
        try:
            engine = self.space.engine_of(i, threshold, tp)
        except ConfigError as exc:
            self.log(f"skip     {shape.name} TP{tp}: {exc}")
            return None
        if shape.name in self.space.guesses:
            return max(1, round(self.space.guesses[shape.name] * shape.tps()[0] / tp))
        items = list(window.items[window.judged_from:])
        if self.space.family == "dual":
            limit = self.space.engine_of(0, threshold, self.space.pools[0].tps()[0]).max_model_len
            items = [it for it in items
                     if (it.view.prompt_tokens + (it.view.max_output_tokens or 1) <= limit) == (i == 0)]
        return guess_pods(items, engine)

    # -- grid search -------------------------------------------------------------------------
    def _grid(self, window: Window, threshold: Threshold, tps: tuple[int, ...], lo: tuple[int, ...],
              hi: tuple[int, ...], floor: tuple[int, ...], stage: str) -> Found:
        cap = self.space.max_pods
        lo_l, hi_l = list(lo), list(hi)
        while True:
            self._measure_diagonal(window, threshold, tps, lo_l, hi_l, stage)
            best = self._cheapest(window, threshold, tps, lo_l, hi_l)
            if best is None:
                if all(h >= cap for h in hi_l):
                    raise NoCapacity(f"no configuration up to --max-pods {cap} per pool meets the SLO "
                                     f"({threshold.label}, TP {tps})")
                hi_l = [min(h + 1, cap) for h in hi_l]
                continue
            counts = [n for _, n in best.counts]
            lower = [i for i, n in enumerate(counts) if n == lo_l[i] and lo_l[i] > floor[i]]
            if lower:
                for i in lower:
                    lo_l[i] -= 1
                continue
            beyond = self._beyond(tps, lo_l, hi_l, best.gpus)
            if beyond is None:
                return best
            hi_l = beyond

    def _measure_diagonal(self, window: Window, threshold: Threshold, tps: tuple[int, ...], lo: list[int],
                          hi: list[int], stage: str) -> None:
        """Measure every pool's counts in [lo, hi], one per pool per trial (a pool with nothing left to
        measure runs at its ``hi``). Stops when a trial teaches nothing new: then a pool fails alone at its
        ``hi``, so every combination left unmeasured fails too."""
        pools = self.space.pools
        while True:
            needed = [[n for n in range(low, h + 1) if self.runner.point(window, threshold, s.name, tp, n) is None]
                      for s, tp, low, h in zip(pools, tps, lo, hi, strict=True)]
            if not any(needed):
                return
            counts = tuple((tp, want[0] if want else h) for tp, want, h in zip(tps, needed, hi, strict=True))
            before = len(self.runner.points)
            self._trial(window, threshold, counts, stage)
            if len(self.runner.points) == before:
                return

    def _cheapest(self, window: Window, threshold: Threshold, tps: tuple[int, ...], lo: list[int],
                  hi: list[int]) -> Found | None:
        best: Found | None = None
        for ns in itertools.product(*(range(low, h + 1) for low, h in zip(lo, hi, strict=True))):
            counts = tuple(zip(tps, ns, strict=True))
            verdict = merged_verdict(self.runner, window, threshold, counts)
            if verdict is None or not verdict.ok:
                continue
            found = Found(threshold, counts, sum(tp * n for tp, n in counts), verdict)
            if best is None or _better(found, best):
                best = found
        return best

    def _beyond(self, tps: tuple[int, ...], lo: list[int], hi: list[int], gpus: int) -> list[int] | None:
        """A wider ``hi`` when a combination outside the grid could still be cheaper than ``gpus``."""
        wider = list(hi)
        for i, tp in enumerate(tps):
            rest = sum(t * n for j, (t, n) in enumerate(zip(tps, lo, strict=True)) if j != i)
            top = min((gpus - rest - 1) // tp, self.space.max_pods)
            wider[i] = max(hi[i], top)
        return None if wider == hi else wider

    # -- confirmation -------------------------------------------------------------------------
    def _confirm(self, found: Found) -> TrialResult:
        """Replay exactly the chosen configuration; if the merge was optimistic, take the next one up."""
        full = self.workload.full
        counts = found.counts
        for _ in range(CONFIRM_ATTEMPTS):
            trial = self.runner.measured(full, found.threshold, counts) or self._trial(full, found.threshold, counts,
                                                                                     "confirm")
            if trial.verdict.ok:
                return trial
            counts = tuple((tp, n + 1) for tp, n in counts)
        raise SearchExhausted(f"the chosen configuration did not confirm on the whole trace after "
                              f"{CONFIRM_ATTEMPTS} attempts ({found.threshold.label})")

    def _trial(self, window: Window, threshold: Threshold, counts: Counts, stage: str) -> TrialResult:
        if len(self.runner.trials) >= self.max_trials:
            raise SearchExhausted(f"--max-trials {self.max_trials} reached before the search finished")
        return self.runner.run(window, threshold, counts, stage)


def _better(a: Found, b: Found) -> bool:
    return (a.gpus, -a.verdict.attainment) < (b.gpus, -b.verdict.attainment)

