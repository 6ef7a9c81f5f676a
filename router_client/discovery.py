"""Endpoint discovery: a pool's pods are every address its name resolves to (e.g. a headless Service).

For each pool with ``"discovery": {"dns": "NAME:PORT", "refresh_s": N}``, one background loop resolves NAME with
the event loop's ``getaddrinfo`` (so ``/etc/hosts`` and DNS are honoured as for any connection, in the loop's
executor: never on the hot path) every N seconds and hands the sorted set of ``http://ADDR:PORT`` URLs to the
:class:`~router_client.membership.Membership`; the router is told what changed (``on_change``).

A failed or empty resolution keeps the last known set — DNS trouble never empties a pool — and is counted
(``router_discovery_refreshes_total{outcome="error"|"empty"}``) and logged at most once per ``LOG_EVERY_S`` per
pool, with one line when resolution works again. A resolution still running when the next one is due is waited
for again instead of being started twice (a hung resolver does not pile up threads).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from router_client.background import BackgroundLoop
from router_client.config import PoolConfig
from router_client.live_metrics import RouterMetrics
from router_client.membership import Change, Membership

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0
"""Failures of one pool's resolution are logged at most this often."""
MAX_RESOLVE_S = 5.0
"""Longest wait for one resolution (bounded by refresh_s as well)."""

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (TCP), sorted, duplicates dropped; OSError when it does not resolve."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = {str(info[4][0]) for info in infos}
    return sorted(addresses, key=lambda a: (ipaddress.ip_address(a).version, ipaddress.ip_address(a)))


def pod_url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


class _PoolDiscovery:
    """The refresh loop of one pool."""

    def __init__(self, pool: PoolConfig, owner: Discovery) -> None:
        assert pool.discovery is not None
        self.name = pool.name
        self.dns = pool.discovery.dns
        self.refresh_s = pool.discovery.refresh_s
        self._host, self._port = pool.discovery.host, pool.discovery.port
        self._owner = owner
        self._pending: asyncio.Future[list[str]] | None = None
        self.loop = BackgroundLoop(f"router-discovery-{pool.name}", self.refresh, self.refresh_s, step_first=False)
        self.last_outcome = "never"
        self.last_refresh_at: float | None = None
        self.last_error: str | None = None
        self._failing_since: float | None = None
        self._logged_at = -float("inf")
        self._suppressed = 0

    async def refresh(self) -> None:
        """Resolve once and apply the answer (or keep the last set)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._owner.resolver(self._host, self._port))
        try:
            async with asyncio.timeout(min(self.refresh_s, MAX_RESOLVE_S)):
                addresses = await asyncio.shield(self._pending)
        except (OSError, TimeoutError, UnicodeError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return
        finally:
            if self._pending is not None and self._pending.done():
                self._pending = None  # a resolution still running is awaited again at the next refresh
        if not addresses:
            self._failed("no addresses")
            return
        self._resolved([pod_url(a, self._port) for a in addresses])

    def cancel_pending(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _resolved(self, urls: list[str]) -> None:
        now = self._owner.clock()
        if self._failing_since is not None:
            log.info("discovery %s (pool %s) resolves again after %.0f s: %d pods", self.dns, self.name,
                     now - self._failing_since, len(urls))
        self._failing_since, self._suppressed, self.last_error = None, 0, None
        change = self._owner.members.update(self.name, urls)
        self._outcome("changed" if change else "ok", now)
        if change:
            log.info("discovery %s (pool %s): joined %s, left %s", self.dns, self.name, list(change.joined),
                     list(change.left))
            self._owner.on_change(change)

    def _failed(self, error: str) -> None:
        now = self._owner.clock()
        self.last_error = error
        self._outcome("empty" if error == "no addresses" else "error", now)
        if self._failing_since is None:
            self._failing_since = now
        if now - self._logged_at < LOG_EVERY_S:
            self._suppressed += 1
            return
        kept = len(self._owner.members.pool(self.name).resolved)
        log.warning("discovery %s (pool %s) failed: %s; keeping the last %d pods (%d failures not logged)",
                    self.dns, self.name, error, kept, self._suppressed)
        self._logged_at, self._suppressed = now, 0

    def _outcome(self, outcome: str, now: float) -> None:
        self.last_outcome, self.last_refresh_at = outcome, now
        self._owner.metrics.discovery_refresh(self.name, outcome)

    def status(self, now: float) -> dict[str, Any]:
        age = None if self.last_refresh_at is None else round(now - self.last_refresh_at, 3)
        return {"dns": self.dns, "refresh_s": self.refresh_s, "last_outcome": self.last_outcome,
                "last_refresh_age_s": age, "last_error": self.last_error}


class Discovery:
    """The refresh loops of every discovered pool; ``start()`` / ``await stop()``, ``await refresh_all()``."""

    def __init__(self, pools: Sequence[PoolConfig], members: Membership, on_change: Callable[[Change], None],
                 metrics: RouterMetrics, resolver: Resolver = resolve,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.members = members
        self.on_change = on_change
        self.metrics = metrics
        self.resolver = resolver
        self.clock = clock
        self._pools = {p.name: _PoolDiscovery(p, self) for p in pools if p.discovery is not None}

    async def refresh_all(self) -> None:
        """Resolve every discovered pool once (the router does this before its first decision)."""
        await asyncio.gather(*(p.refresh() for p in self._pools.values()))

    def start(self) -> None:
        for pool in self._pools.values():
            pool.loop.start()

    async def stop(self) -> None:
        for pool in self._pools.values():
            await pool.loop.stop()
            pool.cancel_pending()

    def status(self, pool: str) -> dict[str, Any] | None:
        """The pool's discovery state for ``/status`` (None: a static pool)."""
        found = self._pools.get(pool)
        return None if found is None else found.status(self.clock())
