"""Pool classifier: short or long pool by token budget (prompt + expected output).

Prompt tokens are exact when the caller knows them, else ``body_bytes / bytes_per_token`` where
bytes/token is an EMA per route learned from ``usage.prompt_tokens``. Expected output is
``max_tokens`` capped by a history percentile of actual outputs (per system-prompt hash when it
has enough samples, else per route), or that percentile / a default when ``max_tokens`` is absent.
Thresholds: see :class:`router_client.config.ClassifierConfig`.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from router_client.config import ClassifierConfig, PoolConfig
from router_client.request import RequestInfo


@dataclass(frozen=True)
class Budget:
    pool: str
    prompt_tokens: int
    estimated: bool
    """True when prompt tokens were estimated from bytes."""
    expected_output: int
    reason: str
    """Why this pool: "output" | "total" | "context" | "short" | "single"."""


class BytesPerToken:
    """EMA of body bytes per prompt token, per key (route)."""

    def __init__(self, default: float, alpha: float) -> None:
        self.default = default
        self.alpha = alpha
        self._ema: dict[str, float] = {}

    def get(self, key: str) -> float:
        return self._ema.get(key, self.default)

    def observe(self, key: str, body_bytes: int, prompt_tokens: int) -> None:
        if body_bytes <= 0 or prompt_tokens <= 0:
            return
        ratio = body_bytes / prompt_tokens
        old = self._ema.get(key)
        self._ema[key] = ratio if old is None else old + self.alpha * (ratio - old)

    def estimate(self, key: str, body_bytes: int) -> int:
        return max(1, math.ceil(body_bytes / self.get(key)))


class OutputHistory:
    """Recent output lengths per key, bounded per key and in the number of keys (LRU). Each key's lengths are
    also kept sorted (updated per observation), so the percentile a decision reads is one index."""

    def __init__(self, size: int, max_keys: int) -> None:
        self.size = size
        self.max_keys = max_keys
        self._hist: OrderedDict[str, tuple[deque[int], list[int]]] = OrderedDict()

    def observe(self, key: str, tokens: int) -> None:
        entry = self._hist.get(key)
        if entry is None:
            entry = self._hist[key] = (deque(), [])
            while len(self._hist) > self.max_keys:
                self._hist.popitem(last=False)
        else:
            self._hist.move_to_end(key)
        recent, ordered = entry
        if len(recent) >= self.size:
            del ordered[bisect.bisect_left(ordered, recent.popleft())]
        recent.append(tokens)
        bisect.insort(ordered, tokens)

    def percentile(self, key: str, pct: float, min_samples: int) -> int | None:
        entry = self._hist.get(key)
        if entry is None or len(entry[1]) < min_samples:
            return None
        ordered = entry[1]
        rank = max(0, math.ceil(pct / 100.0 * len(ordered)) - 1)
        return ordered[rank]


class PoolClassifier:
    def __init__(self, cfg: ClassifierConfig, pools: Sequence[PoolConfig]) -> None:
        self.cfg = cfg
        names = [p.name for p in pools]
        self.single = names[0] if len(names) == 1 else None
        self.short = cfg.short_pool if cfg.short_pool in names else names[0]
        self.long = cfg.long_pool if cfg.long_pool in names else names[-1]
        self.short_context = next(p.max_context for p in pools if p.name == self.short)
        self.bytes_per_token = BytesPerToken(cfg.default_bytes_per_token, cfg.bytes_per_token_alpha)
        self.history = OutputHistory(cfg.history_size, cfg.history_max_keys)
        self.total_threshold = cfg.total_threshold_tokens
        """The total-token threshold in force (``cfg.total_threshold_tokens`` unless tuning moved it)."""

    def set_total_threshold(self, tokens: int | None) -> None:
        """Replace the total-token threshold (pool tuning applies its recommendation here)."""
        self.total_threshold = tokens

    def expected_output(self, route: str, system_prompt_hash: str | None, max_tokens: int | None) -> int:
        cap = None
        if system_prompt_hash is not None:
            cap = self.history.percentile("sys:" + system_prompt_hash, self.cfg.output_percentile,
                                          self.cfg.history_min_samples)
        if cap is None:
            cap = self.history.percentile("route:" + route, self.cfg.output_percentile, self.cfg.history_min_samples)
        if max_tokens is not None and max_tokens > 0:
            return max_tokens if cap is None else min(max_tokens, cap)
        return cap if cap is not None else self.cfg.default_output_tokens

    def classify_tokens(self, prompt_tokens: int, expected_output: int, max_tokens: int | None,
                        short_context: int | None = None) -> tuple[str, str]:
        """(pool, reason) for a known prompt size and expected output (``short_context`` overrides the
        configured short-pool context, e.g. as reported by the pods)."""
        if self.single is not None:
            return self.single, "single"
        worst_output = max_tokens if max_tokens is not None and max_tokens > 0 else expected_output
        if prompt_tokens + worst_output > (short_context or self.short_context):
            return self.long, "context"
        if expected_output > self.cfg.output_threshold_tokens:
            return self.long, "output"
        total = self.total_threshold
        if total is not None and prompt_tokens + expected_output > total:
            return self.long, "total"
        return self.short, "short"

    def classify(self, info: RequestInfo) -> Budget:
        if info.prompt_tokens is not None:
            prompt, estimated = info.prompt_tokens, False
        else:
            prompt, estimated = self.bytes_per_token.estimate(info.route, info.body_bytes), True
        expected = self.expected_output(info.route, info.system_prompt_hash, info.max_tokens)
        pool, reason = self.classify_tokens(prompt, expected, info.max_tokens)
        return Budget(pool, prompt, estimated, expected, reason)

    def observe(self, info: RequestInfo, prompt_tokens: int | None, output_tokens: int) -> None:
        """Learn from a finished request: bytes/token (when usage gave prompt tokens) and output length."""
        if prompt_tokens is not None:
            self.bytes_per_token.observe(info.route, info.body_bytes, prompt_tokens)
        if output_tokens > 0:
            self.history.observe("route:" + info.route, output_tokens)
            if info.system_prompt_hash is not None:
                self.history.observe("sys:" + info.system_prompt_hash, output_tokens)
