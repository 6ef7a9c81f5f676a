"""One proxied request: parse → decide → forward to the chosen pod → relay → report.

Error mapping (see ``http_errors``): shed → 429 + ``Retry-After``; no pod → 503; pod unreachable
before any byte → 502; an upstream error status is passed through with its body; a pod that dies
mid-stream ends the stream with an SSE error event. Routing trouble never becomes a 500: the
library falls back to a composite score when predictions are missing.
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from starlette.responses import Response

from router_client.proxy.errors import NoEndpoint, PrefillFailed, ProxyError, Shed, UpstreamUnavailable
from router_client.proxy.metrics import Outcome, ProxyMetrics
from router_client.proxy.parsing import ParsedRequest, parse_request, upstream_body
from router_client.proxy.relay import RelayResponse, StreamRelay
from router_client.proxy.two_phase import TwoPhase
from router_client.proxy.upstream import ConnectFailed, UpstreamError, UpstreamPool, UpstreamResponse
from router_client.request_log import RequestLog
from router_client.router import Decision, Router
from shared.keepalive import POD_MAX_IDLE_S

_FORWARDED_HEADERS = ("authorization", "traceparent", "tracestate")
_PASSED_BACK_HEADERS = (b"content-type", b"cache-control")


@dataclass(frozen=True)
class ForwardSettings:
    """Proxy knobs that are not router configuration (set from the command line)."""

    connect_timeout_s: float = 5.0
    """Connecting to a pod; beyond this the request fails with 502."""
    max_idle_per_pod: int = 256
    """Idle keep-alive connections kept per pod."""
    pod_max_idle_s: float = POD_MAX_IDLE_S
    """A kept-alive connection to a pod idle longer than this is closed instead of reused (below the pods'
    keep-alive timeout: vLLM's uvicorn closes idle connections after 5 s)."""
    served_model_name: str | None = None
    """Answer ``/v1/models`` with this name instead of asking the pods."""
    pod_ca_file: str | None = None
    """PEM file of the CA(s) that sign ``https://`` pods' certificates (default: the system trust store)."""


def make_pool(settings: ForwardSettings) -> UpstreamPool:
    """The shared keep-alive connections to the pods: no read timeout (long streams), bounded connect."""
    context = ssl.create_default_context(cafile=settings.pod_ca_file) if settings.pod_ca_file else None
    return UpstreamPool(settings.connect_timeout_s, settings.max_idle_per_pod, ssl_context=context,
                        max_idle_s=settings.pod_max_idle_s)


class Forwarder:
    """Turns one OpenAI request into a routed, relayed and reported upstream call."""

    def __init__(self, router: Router, pool: UpstreamPool, metrics: ProxyMetrics,
                 clock: Callable[[], float] = time.monotonic, requests: RequestLog | None = None) -> None:
        self._router = router
        self._pool = pool
        self._metrics = metrics
        self._clock = clock
        self._requests = requests
        self._two_phase = TwoPhase(router, pool, clock)

    async def handle(self, route: str, body: bytes, headers: Mapping[str, str]) -> Response:
        try:
            response = await self._handle(route, body, headers)
        except ProxyError as exc:
            self._metrics.child(self._metrics.responses, route, str(exc.status)).inc()
            raise
        self._metrics.child(self._metrics.responses, route, str(response.status_code)).inc()
        return response

    async def _handle(self, route: str, body: bytes, headers: Mapping[str, str]) -> Response:
        received = self._clock()
        parsed = parse_request(route, body, headers)
        decision = await self._router.decide(parsed.info)
        self._metrics.decided(decision.pool, decision.pod_url, decision.fallback, decision.shed)
        model = str(parsed.payload.get("model") or "")
        labels = (model, model, decision.pool)
        if decision.shed:
            self._metrics.child(self._metrics.errors, *labels, "shed").inc()
            retry = max(1, math.ceil(decision.retry_after_s or 1.0))
            raise Shed(decision.reason, retry_after_s=retry, pool=decision.pool, request_id=parsed.info.request_id)
        if decision.pod_url is None:
            raise NoEndpoint(f"no pod available in pool {decision.pool}: {decision.reason}", retry_after_s=1)
        started = self._clock()
        self._metrics.overhead.observe(started - received)
        forward = _forward_headers(headers, parsed.info.request_id)
        call = _Call(self._router, self._metrics, decision, labels, clock=self._clock)
        call.log = self._requests, received, started
        out_body = upstream_body(parsed, body)
        if decision.prefill is not None:
            out_body = await self._prefill(call, route, parsed, body, forward, started)
            decision = call.decision
        self._metrics.observe_predictions(labels, _total_ttft(decision), decision.predicted_tpot_ms)
        try:
            upstream = await self._pool.post(call.pod, route, out_body, forward)
        except UpstreamError as exc:
            kind = "connect" if isinstance(exc, ConnectFailed) else "no_response"
            call.report(Outcome(None, (self._clock() - started) * 1000.0, 0, None, kind))
            raise UpstreamUnavailable(f"pod {call.pod} did not answer: {exc}",
                                      pod=call.pod, pool=decision.pool) from None
        except BaseException:
            call.report(Outcome(None, (self._clock() - started) * 1000.0, 0, None, "client_disconnect"))
            raise
        out_headers = _response_headers(upstream, decision, parsed.info.request_id)
        if upstream.status_code >= 400 or not parsed.stream:
            return await self._whole(upstream, call, started, out_headers)
        relay = StreamRelay(upstream, started=started, strip_usage=not parsed.client_wants_usage,
                            on_first_token=call.first_token, report=call.report, clock=self._clock)
        return _Streamed(RelayResponse(relay, upstream.status_code, out_headers, self._count_path),
                         upstream.status_code)

    async def _prefill(self, call: _Call, route: str, parsed: ParsedRequest, body: bytes,
                       forward: dict[str, str], started: float) -> bytes:
        """The prefill leg (``two_phase``); ``call`` then reports the decode leg (or, on 502 / the client leaving
        during the prefill, the request's failure)."""
        try:
            call.decision, out_body = await self._two_phase.prefill(route, parsed, body, call.decision, forward)
        except PrefillFailed:
            call.report(Outcome(None, (self._clock() - started) * 1000.0, 0, None, "prefill_failed"))
            raise
        except BaseException:
            call.report(Outcome(None, (self._clock() - started) * 1000.0, 0, None, "client_disconnect"))
            raise
        call.leg_offset_s = self._clock() - started
        return out_body

    def _count_path(self, path: str) -> None:
        self._metrics.child(self._metrics.relay_paths, path).inc()

    async def _whole(self, upstream: UpstreamResponse, call: _Call, started: float,
                     headers: list[tuple[bytes, bytes]]) -> Response:
        """Non-streaming responses and upstream error statuses: read all, pass through, report."""
        try:
            content = await upstream.read()
        except UpstreamError as exc:
            call.report(Outcome(None, (self._clock() - started) * 1000.0, 0, None, "midstream"))
            raise UpstreamUnavailable(f"pod {call.pod} failed while answering: {exc}",
                                      pod=call.pod, pool=call.decision.pool) from None
        finally:
            await upstream.aclose()
        e2e_ms = (self._clock() - started) * 1000.0
        if upstream.status_code >= 400:
            call.report(Outcome(None, e2e_ms, 0, None, str(upstream.status_code)))
        else:
            completion, prompt = _usage_of(content)
            call.report(Outcome(e2e_ms, e2e_ms, completion, prompt))
        return _Raw(content, upstream.status_code, headers)


class _Call:
    """Reporting for one dispatched request (exactly once, to router and metrics)."""

    __slots__ = ("_router", "_metrics", "decision", "_labels", "_reported", "log", "leg_offset_s", "_clock")

    def __init__(self, router: Router, metrics: ProxyMetrics, decision: Decision, labels: tuple[str, str, str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.leg_offset_s = 0.0
        """Dispatch to this pod after the request's start (a decode leg: the prefill leg's time); the router learns
        the leg's own latencies, the client-facing metrics and log the request's."""
        self._router = router
        self._metrics = metrics
        self.decision = decision
        self._labels = labels
        self._reported = False
        self.log: tuple[RequestLog | None, float, float] = (None, 0.0, 0.0)
        """Where the request is recorded, with the times it was received and dispatched (monotonic)."""

    @property
    def pod(self) -> str:
        return self.decision.pod_url or ""

    def first_token(self) -> None:
        self._router.on_first_token(self.decision)
        if self.decision.prefill is not None:
            started = self.log[2]
            self._router.pd.handed_over(self.decision.pool, self._clock() - started - self.leg_offset_s)

    def report(self, outcome: Outcome) -> None:
        if self._reported:
            return
        self._reported = True
        error = outcome.error_code is not None
        offset_ms = self.leg_offset_s * 1000.0
        ttft_ms = outcome.ttft_ms - offset_ms if outcome.ttft_ms is not None else 0.0
        self._router.on_complete(self.decision, ttft_ms, outcome.e2e_ms - offset_ms, outcome.output_tokens,
                                 outcome.prompt_tokens, error=error)
        self._metrics.observe_outcome(self._labels, outcome)
        requests, received, started = self.log
        if requests is not None:
            logged = replace(self.decision, predicted_ttft_ms=_total_ttft(self.decision))
            requests.add(logged, outcome.ttft_ms, outcome.tpot_ms, outcome.output_tokens, outcome.error_code,
                         received, started, outcome.e2e_ms)
        if outcome.error_code in ("midstream", "upstream_event"):
            self._metrics.child(self._metrics.stream_errors, self.decision.pool, self.pod).inc()


def _total_ttft(decision: Decision) -> float | None:
    """The request's predicted TTFT: a disaggregated one's is its prefill leg's + its decode leg's."""
    leg = decision.prefill
    if leg is None or decision.predicted_ttft_ms is None:
        return decision.predicted_ttft_ms
    return None if leg.predicted_ttft_ms is None else leg.predicted_ttft_ms + decision.predicted_ttft_ms


def _forward_headers(headers: Mapping[str, str], request_id: str) -> dict[str, str]:
    out = {"content-type": "application/json", "x-request-id": request_id}
    for name in _FORWARDED_HEADERS:
        value = headers.get(name)
        if value is not None:
            out[name] = value
    return out


def _response_headers(upstream: UpstreamResponse, decision: Decision,
                      request_id: str) -> list[tuple[bytes, bytes]]:
    out = [(name, value) for name, value in upstream.headers if name in _PASSED_BACK_HEADERS]
    out.append((b"x-routed-pod", (decision.pod_url or "").encode()))
    out.append((b"x-routed-pool", decision.pool.encode()))
    out.append((b"x-request-id", request_id.encode()))
    out.append((b"x-routing-fallback", b"true" if decision.fallback else b"false"))
    if decision.pd_choice:
        out.append((b"x-pd-choice", decision.pd_choice.encode()))
    if decision.prefill is not None:
        out.append((b"x-prefill-pod", (decision.prefill.pod_url or "").encode()))
    ttft = _total_ttft(decision)
    if ttft is not None:
        out.append((b"x-predicted-ttft-ms", f"{ttft:.3f}".encode()))
    if decision.predicted_tpot_ms is not None:
        out.append((b"x-predicted-tpot-ms", f"{decision.predicted_tpot_ms:.3f}".encode()))
    return out


def _usage_of(content: bytes) -> tuple[int, int | None]:
    try:
        obj: Any = orjson.loads(content)
    except orjson.JSONDecodeError:
        return 0, None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return 0, None
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    return (completion if isinstance(completion, int) else 0), (prompt if isinstance(prompt, int) else None)


class _Raw(Response):
    """A fully-read upstream body with its status and our headers (no re-encoding)."""

    def __init__(self, content: bytes, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status
        self.body = content
        self.background = None
        self.raw_headers = [*headers, (b"content-length", str(len(content)).encode())]


class _Streamed(Response):
    """Adapter so route handlers return a Starlette ``Response`` for streamed relays."""

    def __init__(self, app: RelayResponse, status: int) -> None:
        self._app = app
        self.status_code = status
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)
