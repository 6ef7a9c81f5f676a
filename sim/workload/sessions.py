"""Synthetic session / shared-prefix model for traces that carry only token counts.

The Azure traces have no content, so prefix identity is synthesised, deterministically per seed:

1. **Multi-turn follow-ups.** With probability ``p_followup`` a request continues a recent
   conversation (picked uniformly among sessions active in the last ``session_ttl_s``) whose
   whole previous context (prompt + output) is shorter than the new prompt: the new prompt
   shares that context as its prefix, like a chat client resending the history.
2. **Shared system prompts.** Otherwise, with probability ``p_system`` the request starts with
   one of ``n_system_prompts`` system prompts (Zipf-popular, lengths uniform in
   ``system_len``), clipped to the prompt length.
3. Otherwise the prompt is unique.

A conversation is one content stream: block ``i`` of a stream hashes ``(stream, i)``; a stream
that starts with a system prompt uses the system prompt's hashes for its first blocks. Hashes are
Python ints (stable across processes, no string hashing).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionModelConfig:
    p_followup: float = 0.3
    p_system: float = 0.5
    n_system_prompts: int = 16
    system_len: tuple[int, int] = (200, 1200)
    session_ttl_s: float = 600.0
    zipf_s: float = 1.1
    block_size: int = 16


@dataclass
class _Session:
    stream: int
    sys_id: int | None
    sys_blocks: int
    context_tokens: int
    last_seen: float


_SYS_BASE = 1 << 40


def stream_block_hash(stream: int, index: int) -> int:
    return hash((stream, index))


class SessionModel:
    def __init__(self, cfg: SessionModelConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self._rng = random.Random(seed * 7919 + 17)
        self._sys_lens = [self._rng.randint(*cfg.system_len) for _ in range(cfg.n_system_prompts)]
        weights = [1.0 / (i + 1) ** cfg.zipf_s for i in range(cfg.n_system_prompts)]
        total = sum(weights)
        self._sys_weights = [w / total for w in weights]
        self._sessions: list[_Session] = []
        self._next_stream = 1

    def assign(self, arrival_s: float, prompt_tokens: int, output_tokens: int) -> tuple[str, tuple[int, ...]]:
        """Return ``(session_key, block_hashes)`` for a request and record its context."""
        session = self._pick_followup(arrival_s, prompt_tokens)
        if session is None:
            session = self._new_session(arrival_s, prompt_tokens)
            self._sessions.append(session)
        hashes = self._hashes(session, prompt_tokens)
        session.context_tokens = prompt_tokens + output_tokens
        session.last_seen = arrival_s
        return f"s{session.stream}", hashes

    def _pick_followup(self, now: float, prompt_tokens: int) -> _Session | None:
        cutoff = now - self.cfg.session_ttl_s
        if self._sessions and self._sessions[0].last_seen < cutoff:
            self._sessions = [s for s in self._sessions if s.last_seen >= cutoff]
        if not self._sessions or self._rng.random() >= self.cfg.p_followup:
            return None
        fits = [s for s in self._sessions[-64:] if s.context_tokens < prompt_tokens]
        return self._rng.choice(fits) if fits else None

    def _new_session(self, now: float, prompt_tokens: int) -> _Session:
        stream = self._next_stream
        self._next_stream += 1
        sys_id: int | None = None
        sys_blocks = 0
        if self._rng.random() < self.cfg.p_system:
            sys_id = self._rng.choices(range(len(self._sys_lens)), self._sys_weights)[0]
            sys_blocks = min(self._sys_lens[sys_id], prompt_tokens) // self.cfg.block_size
        return _Session(stream, sys_id, sys_blocks, 0, now)

    def _hashes(self, s: _Session, prompt_tokens: int) -> tuple[int, ...]:
        n = prompt_tokens // self.cfg.block_size
        out = []
        for i in range(n):
            if s.sys_id is not None and i < s.sys_blocks:
                out.append(stream_block_hash(_SYS_BASE + s.sys_id, i))
            else:
                out.append(stream_block_hash(s.stream, i))
        return tuple(out)
