"""Which pods each pool has, as the hot path reads them: one immutable tuple per pool, replaced whole.

A static pool (``pods`` in the config) never changes and every pod is a candidate from the start. A discovered
pool (``discovery``) changes when :class:`~router_client.discovery.Discovery` hands over a newly resolved set:

* a pod that joins is ``joining`` until its first successful scrape (:meth:`Membership.scraped`), then ``serving``;
* a pod that leaves is no candidate from that moment and is ``leaving`` until the router retires it (once its
  in-flight requests have finished: :meth:`Membership.retire`); a pod that comes back is ``joining`` again;
* the candidates are the serving pods — or, while none serves (start-up, or every pod replaced at once), the
  joining ones: as with stale metrics, a request is never refused for lack of a scrape.

Pods keep the order they were resolved in. Everything here is synchronous and runs on the event loop, so a
decision that reads :meth:`Membership.pods` once sees one consistent tuple however long it awaits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from router_client.config import PoolConfig

SERVING, JOINING, LEAVING = "serving", "joining", "leaving"
STATES = (SERVING, JOINING, LEAVING)


@dataclass(frozen=True)
class Change:
    """What one resolution changed in a pool."""

    pool: str
    joined: tuple[str, ...] = ()
    left: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.joined or self.left)


class PoolMembers:
    """One pool's pods: ``resolved`` (the last set), their states, and ``pods`` (the candidates)."""

    def __init__(self, name: str, pods: Sequence[str] = (), static: bool = False) -> None:
        self.name = name
        self.static = static
        self.resolved: tuple[str, ...] = tuple(dict.fromkeys(pods))
        self._resolved = frozenset(self.resolved)
        self._serving: set[str] = set(self.resolved) if static else set()
        self.leaving: dict[str, None] = {}
        self.pods: tuple[str, ...] = ()
        self._refresh()

    def update(self, pods: Iterable[str]) -> Change:
        """Replace the resolved set (duplicates dropped, order kept); an equal set changes nothing."""
        new = tuple(dict.fromkeys(pods))
        new_set = frozenset(new)
        if new_set == self._resolved:
            return Change(self.name)
        joined = tuple(p for p in new if p not in self._resolved)
        left = tuple(p for p in self.resolved if p not in new_set)
        for pod in joined:
            self.leaving.pop(pod, None)
        for pod in left:
            self._serving.discard(pod)
            self.leaving[pod] = None
        self.resolved, self._resolved = new, new_set
        self._refresh()
        return Change(self.name, joined, left)

    def scraped(self, pod: str) -> bool:
        """The pod answered a scrape: a joining pod starts serving (True when that changed the candidates)."""
        if pod in self._serving or pod not in self._resolved:
            return False
        self._serving.add(pod)
        self._refresh()
        return True

    def state(self, pod: str) -> str | None:
        if pod in self._resolved:
            return SERVING if pod in self._serving else JOINING
        return LEAVING if pod in self.leaving else None

    def members(self) -> tuple[str, ...]:
        """Every resolved pod, then the leaving ones."""
        return (*self.resolved, *self.leaving)

    def counts(self) -> dict[str, int]:
        serving = len(self._serving)
        return {SERVING: serving, JOINING: len(self.resolved) - serving, LEAVING: len(self.leaving)}

    def _refresh(self) -> None:
        serving = tuple(p for p in self.resolved if p in self._serving)
        self.pods = serving or self.resolved


class Membership:
    """Every pool's :class:`PoolMembers`, with the pod → pool index the per-pod state needs."""

    def __init__(self, pools: Sequence[PoolConfig]) -> None:
        self._pools = {p.name: PoolMembers(p.name, p.pods, static=p.discovery is None) for p in pools}
        self._pool_of = {pod: m.name for m in self._pools.values() for pod in m.resolved}
        self._targets = self._all_resolved()

    def __iter__(self) -> Iterator[PoolMembers]:
        return iter(self._pools.values())

    def pool(self, name: str) -> PoolMembers:
        return self._pools[name]

    def pods(self, pool: str) -> tuple[str, ...]:
        """The pool's candidates now (one immutable tuple; read it once per decision)."""
        return self._pools[pool].pods

    def pool_of(self, pod: str) -> str | None:
        """The pool of a resolved or leaving pod (None: not a member)."""
        return self._pool_of.get(pod)

    def state(self, pod: str) -> str | None:
        pool = self._pool_of.get(pod)
        return None if pool is None else self._pools[pool].state(pod)

    def peers(self, pod: str) -> tuple[str, ...]:
        """The resolved pods of ``pod``'s pool (``(pod,)`` for a stranger): the per-pod correction's peers."""
        pool = self._pool_of.get(pod)
        return (pod,) if pool is None else self._pools[pool].resolved

    def scrape_targets(self) -> tuple[str, ...]:
        """Every resolved pod of every pool (leaving pods are no longer scraped)."""
        return self._targets

    def all_pods(self) -> list[str]:
        """Every resolved pod, then the leaving ones."""
        return [*self._targets, *(pod for m in self._pools.values() for pod in m.leaving)]

    def update(self, pool: str, pods: Iterable[str]) -> Change:
        change = self._pools[pool].update(pods)
        for pod in change.joined:
            self._pool_of[pod] = pool
        if change:
            self._targets = self._all_resolved()
        return change

    def scraped(self, pods: Iterable[str]) -> None:
        for pod in pods:
            pool = self._pool_of.get(pod)
            if pool is not None:
                self._pools[pool].scraped(pod)

    def retire(self, pod: str) -> str | None:
        """Forget a leaving pod; its pool's name (None when the pod was not leaving)."""
        pool = self._pool_of.get(pod)
        if pool is None or self._pools[pool].state(pod) != LEAVING:
            return None
        del self._pools[pool].leaving[pod]
        del self._pool_of[pod]
        return pool

    def _all_resolved(self) -> tuple[str, ...]:
        return tuple(pod for m in self._pools.values() for pod in m.resolved)
