"""The prefill half of a disaggregated request (the router does what llm-d's P/D sidecar does).

:meth:`TwoPhase.prefill` sends the prefill pod the client's request as a one-token, non-streamed request with
vLLM's ``kv_transfer_params`` for the prefill side (NixlConnector's fields: ``do_remote_decode: true``,
``do_remote_prefill: false``, the ``remote_*`` fields null), waits at most the pool's ``pd.prefill_timeout_s``
for its answer, and returns the body for the decode pod: the client's request with the ``kv_transfer_params``
the prefill answer returned (``do_remote_prefill: true``, ``remote_engine_id``, ``remote_block_ids``,
``remote_host`` / ``remote_port``, ...), passed on unchanged. The forwarder then streams the decode pod's answer
to the client as for any request.

A prefill pod that cannot be reached, answers an error status, answers without ``kv_transfer_params`` or too
late is a failed prefill: per ``pd.on_prefill_failure`` the decode pod serves the request whole (``aggregate``:
the original body, the decision relabelled ``pod_type`` "", ``pd_choice`` ``prefill_failed``) or the client gets
502 ``prefill_failed`` (:class:`~router_client.proxy.errors.PrefillFailed`) before anything was streamed.
Either way the prefill leg is reported as an error (no training row) and counted in
``router_pd_prefill_failures_total``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson

from router_client.pd.config import PdConfig
from router_client.proxy.errors import PrefillFailed
from router_client.proxy.parsing import ParsedRequest, upstream_body
from router_client.proxy.upstream import ConnectFailed, UpstreamError, UpstreamPool
from router_client.router import Decision, Router

PREFILL_SIDE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                "remote_block_ids": None, "remote_host": None, "remote_port": None}
"""``kv_transfer_params`` of the request to the prefill pod (as llm-d's sidecar sends them)."""
PREFILL_FAILED = "prefill_failed"


def prefill_body(payload: Mapping[str, Any]) -> bytes:
    """The client's request as the prefill pod gets it: one token, not streamed, prefill-side transfer params."""
    out = {k: v for k, v in payload.items() if k != "stream_options"}
    out.update(stream=False, max_tokens=1, kv_transfer_params=PREFILL_SIDE)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return orjson.dumps(out)


def decode_body(parsed: ParsedRequest, params: Mapping[str, Any]) -> bytes:
    """The client's request with the prefill answer's ``kv_transfer_params`` (and the proxy's usage chunk)."""
    out = {**parsed.payload, "kv_transfer_params": dict(params)}
    return upstream_body(replace(parsed, payload=out), orjson.dumps(out))


class _Failed(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class TwoPhase:
    def __init__(self, router: Router, pool: UpstreamPool, clock: Callable[[], float] = time.monotonic) -> None:
        self._router = router
        self._pool = pool
        self._clock = clock

    async def prefill(self, route: str, parsed: ParsedRequest, body: bytes, decision: Decision,
                      headers: Mapping[str, str]) -> tuple[Decision, bytes]:
        """Run ``decision.prefill``; return the decision and body for the decode pod (PrefillFailed: 502)."""
        leg = decision.prefill
        assert leg is not None and leg.pod_url is not None
        pd = self._router.pools[decision.pool].pd
        assert pd is not None
        sent = self._clock()
        try:
            async with asyncio.timeout(pd.prefill_timeout_s):
                params, prompt_tokens = await self._ask(leg.pod_url, route, parsed, headers)
        except (_Failed, TimeoutError) as exc:
            reason, detail = (exc.reason, str(exc)) if isinstance(exc, _Failed) else ("timeout", "no answer in time")
            return await self._failed(decision, pd, reason, detail, sent), upstream_body(parsed, body)
        except BaseException:
            self._router.on_complete(leg, 0.0, (self._clock() - sent) * 1000.0, 0, error=True)
            raise
        seconds = self._clock() - sent
        self._router.on_first_token(leg)
        self._router.on_complete(leg, seconds * 1000.0, seconds * 1000.0, 1, prompt_tokens=prompt_tokens)
        self._router.pd.prefilled(decision.pool, seconds)
        return decision, decode_body(parsed, params)

    async def _ask(self, pod: str, route: str, parsed: ParsedRequest,
                   headers: Mapping[str, str]) -> tuple[Mapping[str, Any], int | None]:
        try:
            upstream = await self._pool.post(pod, route, prefill_body(parsed.payload), dict(headers))
            try:
                content = await upstream.read()
            finally:
                await upstream.aclose()
        except UpstreamError as exc:
            raise _Failed("connect" if isinstance(exc, ConnectFailed) else "no_response", str(exc)) from None
        if upstream.status_code >= 400:
            raise _Failed("status", f"status {upstream.status_code}: {content[:200]!r}")
        return _params_of(content)

    async def _failed(self, decision: Decision, pd: PdConfig, reason: str, detail: str, sent: float) -> Decision:
        leg = decision.prefill
        assert leg is not None
        self._router.on_complete(leg, 0.0, (self._clock() - sent) * 1000.0, 0, error=True)
        self._router.pd.prefill_failed(decision.pool, reason, pd.on_prefill_failure)
        if pd.on_prefill_failure == "error":
            raise PrefillFailed(f"prefill pod {leg.pod_url} failed ({reason}): {detail}", pod=leg.pod_url or "",
                                pool=decision.pool)
        return replace(await self._router.serve_whole(decision), pd_choice=PREFILL_FAILED)


def _params_of(content: bytes) -> tuple[Mapping[str, Any], int | None]:
    try:
        obj: Any = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise _Failed("no_kv_transfer_params", "the answer is not JSON") from None
    params = obj.get("kv_transfer_params") if isinstance(obj, dict) else None
    if not isinstance(params, dict) or not params.get("do_remote_prefill"):
        raise _Failed("no_kv_transfer_params", "the answer carries no kv_transfer_params with do_remote_prefill "
                      "(is the pod's engine started with a KV connector?)")
    usage = obj.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return params, prompt if isinstance(prompt, int) else None

