"""ASGI app of one simulated vLLM pod: OpenAI completions / chat (SSE or not), models, health, metrics.

Domain errors (:class:`sim.engine.errors.RequestRejected` subclasses) are mapped to OpenAI-shaped
HTTP errors here and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from sim.engine import ConfigError, PodFailed, PromptTooLong, RequestRejected, Sequence
from sim.paths import default_trace
from sim.pod.admin import add_admin_routes
from sim.pod.config import PodConfig
from sim.pod.metrics import PodMetrics
from sim.pod.openai import BadRequest, ParsedRequest, ResponseShaper, error_body, parse, usage
from sim.pod.prompt import account
from sim.pod.runtime import PodRuntime, TokenSink
from sim.pod.transfer import Transfer, check_role, parse_transfer, remote_kv, returned_params
from sim.workload.trace import output_length_sampler


class Overloaded(RequestRejected):
    code = "overloaded"


def _status(exc: RequestRejected) -> tuple[int, str]:
    if isinstance(exc, (Overloaded, PodFailed)):
        return 503, "ServiceUnavailableError"
    if isinstance(exc, (PromptTooLong, BadRequest)):
        return 400, "BadRequestError"
    return 400, "BadRequestError"


class _Handler:
    def __init__(self, cfg: PodConfig, runtime: PodRuntime) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.model = cfg.engine.model_name
        trace = cfg.output_trace or default_trace()
        self._sampler = cache(lambda: output_length_sampler(trace, cfg.engine.seed))

    def _output_len(self, req: ParsedRequest, prompt_tokens: int) -> tuple[int, bool]:
        """Tokens to generate and whether the request is cut by a length limit."""
        if req.output_tokens is not None:
            out, limited = req.output_tokens, False
            if req.max_tokens is not None and req.max_tokens < out:
                out, limited = req.max_tokens, True
        elif req.max_tokens is not None:
            out, limited = req.max_tokens, True
        else:
            sample: Callable[[], int] = self._sampler()
            out, limited = sample(), False
        room = self.cfg.engine.max_model_len - prompt_tokens
        if out >= room:
            out, limited = room, True
        return out, limited

    async def handle(self, request: Request, kind: str) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from exc
        req = parse(body, kind)
        transfer = parse_transfer(body)
        check_role(self.cfg.role, transfer)
        block = self.cfg.engine.block_size
        prompt_tokens, hashes = account(req.text, req.token_ids, req.prompt_token_count, block)
        if self.runtime.engine.failed:
            raise PodFailed()
        self.runtime.engine.check_fits(prompt_tokens, req.max_tokens or 0)
        if self.runtime.queue_depth() >= self.cfg.max_queue:
            raise Overloaded(f"pod queue is full ({self.cfg.max_queue} waiting requests)")
        output, limited = self._output_len(req, prompt_tokens)
        shaper = ResponseShaper(kind, self.model)
        sink = TokenSink(asyncio.get_running_loop(), limited)
        seq = Sequence(shaper.id, prompt_tokens, output, hashes, payload=sink)
        seq.remote = sink.remote = remote_kv(transfer, self.cfg.engine.tensor_parallel_size)
        self.runtime.submit(seq)
        if req.stream:
            stream = self._sse(seq, sink, shaper, req.include_usage)
            return StreamingResponse(stream, media_type="text/event-stream")
        return await self._collect(seq, sink, shaper, self._returned(request, transfer, shaper.id, prompt_tokens))

    def _returned(self, request: Request, transfer: Transfer, request_id: str,
                  prompt_tokens: int) -> dict[str, object] | None:
        """The ``kv_transfer_params`` of a prefill half's answer (None for any other request)."""
        if not transfer.remote_decode:
            return None
        host, port = request.scope.get("server") or ("127.0.0.1", 0)
        e = self.cfg.engine
        return returned_params(self.cfg.pod_id, request_id, prompt_tokens, e.block_size, host, port,
                               e.tensor_parallel_size)

    async def _collect(self, seq: Sequence, sink: TokenSink, shaper: ResponseShaper,
                       kv_params: dict[str, object] | None = None) -> Response:
        try:
            while True:
                ev = await sink.queue.get()
                if ev.finish_reason is not None:
                    break
        except asyncio.CancelledError:
            self.runtime.abort(seq)
            raise
        if ev.error is not None:
            raise PodFailed(ev.error)
        body = shaper.full(ev.index, ev.finish_reason, usage(seq.prompt_len, ev.index))
        if kv_params is not None:
            body["kv_transfer_params"] = kv_params
        return Response(orjson.dumps(body), media_type="application/json")

    async def _sse(
        self, seq: Sequence, sink: TokenSink, shaper: ResponseShaper, include_usage: bool
    ) -> AsyncIterator[bytes]:
        done = False
        try:
            while True:
                ev = await sink.queue.get()
                if ev.error is not None:
                    done = True
                    yield b"data: " + orjson.dumps(error_body(ev.error, "ServiceUnavailableError", 503)) + b"\n\n"
                    yield b"data: [DONE]\n\n"
                    return
                yield b"data: " + orjson.dumps(shaper.chunk(ev.index, ev.finish_reason)) + b"\n\n"
                if ev.finish_reason is not None:
                    break
            done = True
            if include_usage:
                yield b"data: " + orjson.dumps(shaper.usage_chunk(usage(seq.prompt_len, ev.index))) + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            if not done:
                self.runtime.abort(seq)


def build_app(cfg: PodConfig) -> FastAPI:
    """A self-contained pod app; the engine thread starts and stops with the ASGI lifespan."""
    metrics = PodMetrics(cfg.engine.model_name)
    runtime = PodRuntime(cfg, metrics)
    metrics.attach_state(runtime.view)
    handler = _Handler(cfg, runtime)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            runtime.stop()

    app = FastAPI(title="sim-pod", lifespan=lifespan)
    app.state.runtime = runtime
    app.state.config = cfg

    @app.exception_handler(RequestRejected)
    async def _rejected(_request: Request, exc: RequestRejected) -> JSONResponse:
        status, err_type = _status(exc)
        return JSONResponse(error_body(str(exc), err_type, status), status_code=status)

    @app.exception_handler(ConfigError)
    async def _bad_config(_request: Request, exc: ConfigError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), "BadRequestError", 400), status_code=400)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handler.handle(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handler.handle(request, "chat")

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        card = {"id": handler.model, "object": "model", "created": 0, "owned_by": "sim",
                "root": cfg.engine.model.name, "max_model_len": cfg.engine.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> JSONResponse:
        ok = runtime.alive and not runtime.engine.failed
        status = "ok" if ok else "failed" if runtime.engine.failed else "engine stopped"
        body = {"status": status, "model": handler.model, "pool": cfg.pool, "preset": cfg.engine.preset,
                "pod": cfg.pod_id, "role": cfg.role}
        return JSONResponse(body, status_code=200 if ok else 503)

    add_admin_routes(app, runtime)

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app
