"""Trace-driven chat requests with real lengths and synthetic but realistic shared prefixes.

Arrivals and (prompt, output) token counts come from the Azure LLM 2023 conversation trace
(rate-scaled). Content is synthesised so prefix caching matters, like a chat service:

- with probability ``p_followup`` a request continues a recent conversation whose context
  (previous prompt + answer) is shorter than the new prompt: the history is resent verbatim;
- otherwise, with probability ``p_system``, it starts with one of ``n_system`` shared system
  prompts (Zipf-popular);
- the rest of the prompt is unique text.

Text is ~4 bytes per token (the simulator's estimate); the exact count travels in the sim's
``prompt_token_count`` extension field and the output length in ``output_tokens``.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.workload.tokens import token_requests
from sim.workload.trace import TraceRequest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "azure_llm_2023_conv.csv"
_WORDS = ("cache", "token", "route", "pod", "queue", "batch", "model", "prefix", "latency", "stream",
          "decode", "prefill", "kv", "block", "GPU", "serve")
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class TraceRow:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class DemoRequest:
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    body: dict[str, Any]
    kind: str
    """``followup``, ``system`` or ``unique`` (chat); ``tokens`` (token-id completions for real engines)."""
    route: str = "/v1/chat/completions"


def load_trace(path: Path, rate_scale: float, duration_s: float, start_s: float = 0.0) -> list[TraceRow]:
    """Rows with ``start_s ≤ arrived_at < start_s + duration_s × rate_scale``, arrivals rescaled to start at 0."""
    rows = []
    end = start_s + duration_s * rate_scale
    with path.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            t = float(rec["arrived_at"])
            if t < start_s:
                continue
            if t >= end:
                break
            rows.append(TraceRow((t - start_s) / rate_scale, max(1, int(rec["num_prefill_tokens"])),
                                 max(1, int(rec["num_decode_tokens"]))))
    return rows


class _Text:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def make(self, tag: str, tokens: int) -> str:
        """About ``tokens`` tokens of text starting with ``tag`` (unique tags → distinct prefixes)."""
        n_bytes = max(len(tag) + 1, tokens * BYTES_PER_TOKEN)
        words = self._rng.choices(_WORDS, k=n_bytes // 5 + 1)
        return (tag + " " + " ".join(words))[:n_bytes]


@dataclass
class _Conversation:
    messages: list[dict[str, str]]
    context_tokens: int
    last_seen: float


class ChatWorkload:
    """Turns trace rows into chat request bodies with shared system prompts and resent histories."""

    def __init__(self, seed: int = 0, n_system: int = 12, p_followup: float = 0.3, p_system: float = 0.6,
                 system_tokens: tuple[int, int] = (200, 1000), session_ttl_s: float = 60.0,
                 model: str = "demo") -> None:
        self._rng = random.Random(seed)
        self._text = _Text(self._rng)
        lengths = [self._rng.randint(*system_tokens) for _ in range(n_system)]
        self._systems = [self._text.make(f"[system prompt {i}]", n) for i, n in enumerate(lengths)]
        self._system_tokens = lengths
        weights = [1.0 / (i + 1) ** 1.1 for i in range(n_system)]
        self._weights = [w / sum(weights) for w in weights]
        self._p_followup, self._p_system, self._ttl = p_followup, p_system, session_ttl_s
        self._sessions: list[_Conversation] = []
        self._model = model

    def requests(self, rows: list[TraceRow]) -> Iterator[DemoRequest]:
        for i, row in enumerate(rows):
            messages, kind = self._messages(i, row)
            body = {"model": self._model, "messages": messages, "stream": True,
                    "max_tokens": row.output_tokens, "output_tokens": row.output_tokens,
                    "prompt_token_count": row.prompt_tokens}
            yield DemoRequest(i, row.arrival_s, row.prompt_tokens, row.output_tokens, body, kind)

    def _messages(self, i: int, row: TraceRow) -> tuple[list[dict[str, str]], str]:
        self._sessions = [s for s in self._sessions[-64:] if s.last_seen >= row.arrival_s - self._ttl]
        fits = [s for s in self._sessions if s.context_tokens < row.prompt_tokens]
        conv: _Conversation | None = None
        kind = "unique"
        if fits and self._rng.random() < self._p_followup:
            conv, kind = self._rng.choice(fits), "followup"
            history, used = list(conv.messages), conv.context_tokens
        elif self._rng.random() < self._p_system:
            k = self._rng.choices(range(len(self._systems)), self._weights)[0]
            used = min(self._system_tokens[k], row.prompt_tokens // 2)
            history, kind = [{"role": "system", "content": self._systems[k][:used * BYTES_PER_TOKEN]}], "system"
        else:
            history, used = [], 0
        question = self._text.make(f"[user {i}]", max(1, row.prompt_tokens - used))
        messages = [*history, {"role": "user", "content": question}]
        answer = self._text.make(f"[answer {i}]", row.output_tokens)
        turn = [*messages, {"role": "assistant", "content": answer}]
        if conv is None:
            conv = _Conversation(turn, 0, row.arrival_s)
            self._sessions.append(conv)
        conv.messages, conv.context_tokens, conv.last_seen = turn, row.prompt_tokens + row.output_tokens, row.arrival_s
        return messages, kind


class TokenWorkload:
    """Trace rows as streaming ``/v1/completions`` with token-id prompts for real engines: the simulator's
    session model gives the prefix structure (shared system prompts, resent conversations), prompts that do
    not fit ``max_model_len`` are clipped (counted in ``clipped``), ``ignore_eos`` makes every request
    generate exactly the trace's output length."""

    def __init__(self, seed: int = 0, max_model_len: int = 4096, vocab: int = 8192, block_size: int = 16,
                 model: str = "tiny") -> None:
        self._seed, self._max_len, self._vocab, self._block = seed, max_model_len, vocab, block_size
        self._model = model
        self.clipped = 0

    def requests(self, rows: list[TraceRow]) -> Iterator[DemoRequest]:
        trace = [TraceRequest(f"r{i}", r.arrival_s, r.prompt_tokens, r.output_tokens) for i, r in enumerate(rows)]
        for req in token_requests(trace, self._max_len, self._seed):
            self.clipped += req.clipped
            body = {"model": self._model, "prompt": req.token_ids(self._block, self._vocab), "stream": True,
                    "max_tokens": req.output_tokens, "ignore_eos": True}
            yield DemoRequest(req.index, req.arrival_s, req.prompt_tokens, req.output_tokens, body, "tokens",
                              "/v1/completions")
