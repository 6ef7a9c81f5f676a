"""Token-id prompts with the simulator's prefix structure, for real engines.

The session model (:mod:`sim.workload.sessions`) gives each request a tuple of block hashes: equal hashes
= equal content (a shared system prompt, a resent conversation). A real engine needs tokens, so each block
hash becomes ``block_size`` token ids drawn from a generator seeded by the hash — the same block always
becomes the same tokens, in any process — and the tail shorter than a block is unique to the request.
Sent as ``"prompt": [ids]`` to ``/v1/completions``, two prompts share exactly the prefix their hashes share,
so the engine's prefix cache sees what the simulator's does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from sim.workload.sessions import SessionModel, SessionModelConfig
from sim.workload.trace import TraceRequest

FIRST_ID = 3
"""Ids below this are the tiny model's special tokens (``<s>``, ``</s>``, ``<unk>``)."""


def block_token_ids(block_hash: int, block_size: int, vocab: int) -> list[int]:
    rng = random.Random(block_hash)
    return [rng.randrange(FIRST_ID, vocab) for _ in range(block_size)]


def prompt_token_ids(hashes: Sequence[int], prompt_tokens: int, block_size: int, vocab: int,
                     salt: int) -> list[int]:
    """``prompt_tokens`` ids: one block of ids per hash, then a unique tail (``salt`` = the request)."""
    ids: list[int] = []
    for h in hashes:
        ids.extend(block_token_ids(h, block_size, vocab))
    tail = random.Random(-1 - salt)
    ids.extend(tail.randrange(FIRST_ID, vocab) for _ in range(prompt_tokens - len(ids)))
    return ids[:prompt_tokens]


@dataclass(frozen=True)
class TokenRequest:
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    session: str
    hashes: tuple[int, ...]
    clipped: bool
    """The trace's prompt (or prompt + output) did not fit the context and was cut to fit."""

    def token_ids(self, block_size: int, vocab: int) -> list[int]:
        return prompt_token_ids(self.hashes, self.prompt_tokens, block_size, vocab, self.index)


def fit_to_context(prompt: int, output: int, max_model_len: int) -> tuple[int, int, bool]:
    """Clip a (prompt, output) pair so that prompt + output <= max_model_len - 1 (vLLM's rule)."""
    limit = max_model_len - 1
    if prompt + output <= limit:
        return prompt, output, False
    output = min(output, max(1, limit // 8))
    return min(prompt, limit - output), output, True


def token_requests(rows: Sequence[TraceRequest], max_model_len: int, seed: int = 0,
                   cfg: SessionModelConfig | None = None) -> list[TokenRequest]:
    """The trace's rows with session prefixes (the simulator's model and seed), clipped to the context."""
    sessions = SessionModel(cfg or SessionModelConfig(), seed)
    out = []
    for i, row in enumerate(rows):
        prompt, output, clipped = fit_to_context(row.prompt_tokens, row.output_tokens, max_model_len)
        session, hashes = sessions.assign(row.arrival_s, prompt, output)
        out.append(TokenRequest(i, row.arrival_s, prompt, output, session, hashes, clipped))
    return out
