"""``clairvoyant``: an oracle bound for the replay — routes each request to the pod where it would get its first
token soonest, known exactly from the pods' engine state.

For every candidate pod the policy forks the pod's engine as it is at the arrival (:func:`sim.engine.fork.fork_engine`:
the queue, the running sequences with their true output lengths, the KV pool and prefix cache, the step-time
noise stream), adds the request and runs the fork until its first token (:func:`sim.engine.fork.first_token_at`),
ignoring every later arrival. It picks the lowest simulated first-token time. Ties (equal times, e.g. without
step-time noise) go to the pod with the fewest router-side in-flight requests, then to the earlier candidate.

No router can see this much: the policy reads the simulator's engines (``bind_pods``, called by the replay),
not the snapshots. It is greedy — it minimises each request's own TTFT, not the tail of all of them (it does
not weigh what the request costs the requests already on the pod, nor those still to come) — so it bounds what a
per-request latency predictor could reach, not what any router could.

Exact shortcuts, same pick: pods are simulated in order of fewest waiting then in-flight requests, and a
pod's simulation stops as soon as its clock passes the best first-token time found so far. ``status()`` reports
the cost (forks, simulated steps, pods cut short, seconds spent forking and simulating).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.cluster.simulation import SimPod
from sim.engine.errors import SimError
from sim.engine.fork import first_token_at, fork_engine
from sim.engine.sequence import Sequence as EngineSeq


class ClairvoyantPolicy:
    name = "clairvoyant"

    def __init__(self, ctx: PolicyContext) -> None:
        unknown = set(ctx.options) - {"fast_forward"}
        if unknown:
            raise ValueError(f"unknown policy options: {sorted(unknown)}")
        self.fast_forward = ctx.options.get("fast_forward", "true").lower() == "true"
        self._pods: dict[str, SimPod] = {}
        self.decisions = 0
        self.forks = 0
        self.cut_short = 0
        self.steps = 0
        self.fork_s = 0.0
        self.simulate_s = 0.0

    def bind_pods(self, pods: Sequence[SimPod]) -> None:
        """The replay hands over its pods (their engines are advanced to each arrival before ``choose``)."""
        self._pods = {p.pod_id: p for p in pods}

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        if not self._pods:
            raise SimError("clairvoyant needs the replay's pods (ClusterSimulation calls bind_pods)")
        self.decisions += 1
        order = sorted(range(len(pods)), key=lambda i: (pods[i].metrics.num_requests_waiting, pods[i].in_flight, i))
        best: tuple[float, int, int] | None = None
        for i in order:
            at = self._first_token_at(pods[i].pod_id, request, math.inf if best is None else best[0])
            key = (at, pods[i].in_flight, i)
            if best is None or key < best:
                best = key
        assert best is not None
        at, _, index = best
        ttft_ms = (at - request.arrival_s) * 1e3 if math.isfinite(at) else None
        return Decision.route(pods[index].pod_id, predicted_ttft_ms=ttft_ms)

    def _first_token_at(self, pod_id: str, request: RequestView, give_up_at: float) -> float:
        engine = self._pods[pod_id].engine
        t0 = time.perf_counter()
        fork = fork_engine(engine)
        t1 = time.perf_counter()
        steps_before = fork.stats.steps
        seq = EngineSeq(request.request_id, request.prompt_tokens, _output_guess(request), request.block_hashes)
        at = first_token_at(fork, seq, request.arrival_s, give_up_at, self.fast_forward)
        self.fork_s += t1 - t0
        self.simulate_s += time.perf_counter() - t1
        self.forks += 1
        self.steps += fork.stats.steps - steps_before
        if math.isinf(at) and math.isfinite(give_up_at):
            self.cut_short += 1
        return at

    def on_complete(self, completion: Completion) -> None:
        return None

    def status(self) -> dict[str, object]:
        n = max(self.decisions, 1)
        return {
            "decisions": self.decisions,
            "forks": self.forks,
            "cut_short": self.cut_short,
            "simulated_steps": self.steps,
            "fork_s": round(self.fork_s, 3),
            "simulate_s": round(self.simulate_s, 3),
            "ms_per_decision": round((self.fork_s + self.simulate_s) * 1e3 / n, 3),
        }


def _output_guess(request: RequestView) -> int:
    """The request's own output length does not move its first token (only the prompt is computed before it)."""
    return max(1, request.expected_output_tokens or request.max_output_tokens or 1)


def clairvoyant(ctx: PolicyContext) -> ClairvoyantPolicy:
    return ClairvoyantPolicy(ctx)
