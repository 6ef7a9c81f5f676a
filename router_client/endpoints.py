"""Endpoint state: the scraped-metrics snapshot (replaced whole by the scraper, only read by the hot
path) plus router-side in-flight tracking, turned into one contract feature row per pod.

The tracked pods change with discovery: :meth:`EndpointState.add` a pod that joined, :meth:`EndpointState.drop`
one that left once nothing is in flight there. In-flight requests of a pod that left finish and are released
normally; scrapes of pods no longer tracked are ignored."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from router_client.candidates import pod_base, request_row
from router_client.config import PoolConfig
from shared.features import FeatureRow

Row = FeatureRow


@dataclass(frozen=True, slots=True)
class PodMetrics:
    """One scrape of a pod's vLLM ``/metrics``."""

    waiting: int = 0
    running: int = 0
    kv_cache: float = 0.0
    """KV-cache usage fraction 0..1."""
    preemptions: int = 0
    scraped_at: float = float("-inf")
    """Monotonic time of the scrape (-inf: never scraped)."""


NEVER_SCRAPED = PodMetrics()
NEVER = NEVER_SCRAPED.scraped_at


@dataclass(slots=True)
class _Open:
    pod: str
    uncached: int
    first_token_seen: bool = False


class EndpointState:
    def __init__(self, pods: Iterable[str], stale_after_s: float, clock: Callable[[], float]) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._snapshot: Mapping[str, PodMetrics] = MappingProxyType(dict.fromkeys(pods, NEVER_SCRAPED))
        self._running = dict.fromkeys(self._snapshot, 0)
        self._prefill = dict.fromkeys(self._snapshot, 0)
        self._open: dict[int | str, _Open] = {}
        self._bases: dict[tuple[str, str], FeatureRow] = {}
        """(pool, pod) → :func:`~router_client.candidates.pod_base` of the pod's scrape in ``_bases_of``."""
        self._bases_of: Mapping[str, PodMetrics] = self._snapshot
        self._scrape_span: tuple[Mapping[str, PodMetrics], tuple[str, ...], float, float] | None = None
        """(snapshot, pods, oldest, newest scrape of those pods) for :meth:`stale`."""

    # -- tracked pods -------------------------------------------------------------------------
    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(self._snapshot)

    def add(self, pod: str) -> None:
        """Track a pod that joined (never scraped yet; a pod still tracked keeps its state)."""
        if pod not in self._snapshot:
            self._snapshot = MappingProxyType({**self._snapshot, pod: NEVER_SCRAPED})
        self._running.setdefault(pod, 0)
        self._prefill.setdefault(pod, 0)

    def drop(self, pod: str) -> None:
        """Forget a pod that left (call it once :meth:`running` is 0)."""
        if pod in self._snapshot:
            self._snapshot = MappingProxyType({p: m for p, m in self._snapshot.items() if p != pod})
        self._running.pop(pod, None)
        self._prefill.pop(pod, None)

    # -- scraped metrics -------------------------------------------------------------------
    @property
    def snapshot(self) -> Mapping[str, PodMetrics]:
        return self._snapshot

    def publish(self, updates: Mapping[str, PodMetrics]) -> None:
        """Replace the snapshot with one where ``updates`` override the previous values (of tracked pods)."""
        merged = dict(self._snapshot)
        merged.update((pod, m) for pod, m in updates.items() if pod in merged)
        self._snapshot = MappingProxyType(merged)

    def now(self) -> float:
        return self._clock()

    def staleness(self, pod: str) -> float:
        return self._clock() - self._snapshot.get(pod, NEVER_SCRAPED).scraped_at

    def is_stale(self, pod: str) -> bool:
        return self.staleness(pod) > self.stale_after_s

    def stale(self, pods: tuple[str, ...]) -> Collection[str]:
        """The pods of ``pods`` that are stale now: none or all of them without a pass over them (from their
        oldest and newest scrape, kept per snapshot and ``pods`` tuple), else a set."""
        now, limit = self._clock(), self.stale_after_s
        span = self._scrape_span
        if span is None or span[0] is not self._snapshot or span[1] is not pods:
            times = [self._snapshot.get(pod, NEVER_SCRAPED).scraped_at for pod in pods]
            span = self._scrape_span = (self._snapshot, pods, min(times, default=NEVER), max(times, default=NEVER))
        if now - span[2] <= limit:
            return ()
        if now - span[3] > limit:
            return pods
        snap = self._snapshot
        return {pod for pod in pods if now - snap.get(pod, NEVER_SCRAPED).scraped_at > limit}

    def lagging(self, pods: tuple[str, ...]) -> set[str]:
        """The pods of ``pods`` whose last scrape is more than ``stale_after_s`` behind the freshest one's: when
        every pod is stale (a loaded machine answers /metrics late), a pod that died still stands out."""
        snap = self._snapshot
        times = {pod: snap.get(pod, NEVER_SCRAPED).scraped_at for pod in pods}
        newest = max(times.values(), default=NEVER)
        return {pod for pod, t in times.items() if newest - t > self.stale_after_s}

    # -- router-side in-flight --------------------------------------------------------------
    def dispatch(self, key: int | str, pod: str, uncached_tokens: int) -> None:
        if key in self._open:
            self.complete(key)
        self._open[key] = _Open(pod, uncached_tokens)
        self._running[pod] = self._running.get(pod, 0) + 1
        self._prefill[pod] = self._prefill.get(pod, 0) + uncached_tokens

    def first_token(self, key: int | str) -> None:
        entry = self._open.get(key)
        if entry is None or entry.first_token_seen:
            return
        entry.first_token_seen = True
        self._prefill[entry.pod] = self._prefill.get(entry.pod, entry.uncached) - entry.uncached

    def complete(self, key: int | str) -> bool:
        """Release the request; True when its first token had been seen (its TTFT was measured)."""
        entry = self._open.get(key)
        streamed = entry is not None and entry.first_token_seen
        self.first_token(key)
        entry = self._open.pop(key, None)
        if entry is not None:
            self._running[entry.pod] = self._running.get(entry.pod, 1) - 1
        return streamed

    def running(self, pod: str) -> int:
        return self._running.get(pod, 0)

    def prefill_in_flight(self, pod: str) -> int:
        return self._prefill.get(pod, 0)

    # -- features ---------------------------------------------------------------------------
    def feature_rows(self, pool: PoolConfig, pods: Sequence[str], prompt_tokens: int,
                     prefix_scores: Sequence[float]) -> list[Row]:
        """The contract row per pod of ``pods`` (of ``pool``, with its ``pod_type`` and each pod's configured
        ``pod_class``): :func:`~router_client.candidates.pod_row` of the snapshot and the in-flight counts. The
        scraped part (:func:`~router_client.candidates.pod_base`) is built once per pod and snapshot: a new
        snapshot (a scrape, a pod added or dropped) drops them all."""
        if self._bases_of is not self._snapshot:
            self._bases_of, self._bases = self._snapshot, {}
        bases, running, prefill, name = self._bases, self._running, self._prefill, pool.name
        rows: list[Row] = []
        for pod, prefix in zip(pods, prefix_scores, strict=True):
            base = bases.get((name, pod))
            if base is None:
                base = bases[(name, pod)] = self._base(pool, pod)
            rows.append(request_row(base, prompt_tokens=prompt_tokens, running=running.get(pod, 0),
                                    prefill_tokens_in_flight=prefill.get(pod, 0), prefix_score=prefix))
        return rows

    def _base(self, pool: PoolConfig, pod: str) -> FeatureRow:
        m = self._snapshot.get(pod, NEVER_SCRAPED)
        return pod_base(kv_cache=m.kv_cache, waiting=m.waiting, pod_type=pool.pod_type, pod_class=pool.class_of(pod))
