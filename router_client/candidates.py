"""One builder of a pod's contract feature row and of its scheduling :class:`Candidate`, for the router
(:meth:`~router_client.endpoints.EndpointState.feature_rows`, :class:`~router_client.router.Router`) and for
the simulator's replay policies (``sim.cluster.policy.PodSnapshot.features``, ``sim.policies``), so both send
the same row and schedule the same candidate for the same pod state."""

from __future__ import annotations

from collections.abc import Sequence

from router_client.scheduling.contracts import Candidate
from shared.features import FeatureRow, feature_row

__all__ = ["candidates", "pod_row"]


def pod_row(*, prompt_tokens: int, kv_cache: float, waiting: int, running: int, prefill_tokens_in_flight: int,
            prefix_score: float, pod_type: str, pod_class: str, num_tokens_generated: int = 1) -> FeatureRow:
    """The contract fields for one (request, pod): scraped ``kv_cache`` (clamped to 0..1) and ``waiting``,
    router-side ``running`` and uncached ``prefill_tokens_in_flight`` (at least 0), the router's
    ``prefix_score``; num_tokens_generated = 1 as the EPP sends it. What a router does not measure — decode
    tokens in flight, encoder sizes — keeps its default."""
    return feature_row({
        "kv_cache_percentage": min(max(kv_cache, 0.0), 1.0),
        "input_token_length": prompt_tokens,
        "num_request_waiting": waiting,
        "num_request_running": running,
        "num_tokens_generated": num_tokens_generated,
        "prefix_cache_score": prefix_score,
        "pod_type": pod_type,
        "prefill_tokens_in_flight": max(prefill_tokens_in_flight, 0),
        "pod_class": pod_class,
    })


def candidates(pods: Sequence[str], rows: Sequence[FeatureRow],
               predictions: Sequence[Sequence[float | None]] | None = None) -> list[Candidate]:
    """One candidate per pod from its feature row (``row`` = its index) and, when there are predictions, its
    ``(ttft, tpot)`` optionally followed by the admission quantile's ``(ttft, tpot)``."""
    out = []
    for i, (pod, row) in enumerate(zip(pods, rows, strict=True)):
        ttft, tpot, admit_ttft, admit_tpot = _four(predictions[i] if predictions is not None else ())
        out.append(Candidate(
            pod=pod, kv_cache=float(row["kv_cache_percentage"]), waiting=int(row["num_request_waiting"]),
            running=int(row["num_request_running"]), prefill_tokens_in_flight=int(row["prefill_tokens_in_flight"]),
            prefix_score=float(row["prefix_cache_score"]), predicted_ttft_ms=ttft, predicted_tpot_ms=tpot, row=i,
            admit_ttft_ms=admit_ttft, admit_tpot_ms=admit_tpot))
    return out


def _four(prediction: Sequence[float | None]) -> tuple[float | None, float | None, float | None, float | None]:
    padded = (*prediction, None, None, None, None)
    return padded[0], padded[1], padded[2], padded[3]
