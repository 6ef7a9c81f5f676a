"""Client request budgets: the ``max_tokens`` a client puts on each replayed request.

Traces record how many tokens were generated, not what the client asked for; a real client sends a
cap (or none) that does not know the answer. ``--max-tokens-policy`` picks how the replay draws it:

| spec | ``max_tokens`` of every request |
| --- | --- |
| ``fixed:N`` | ``N`` (default ``fixed:1024``; the conv trace's longest output is 1,000 tokens) |
| ``multiple:K`` | ``ceil(K x median output of the replayed slice)``: sized from the app's typical answer |
| ``choice:N1=W1,N2=W2,...`` | one ``N`` per request, drawn with weights ``W`` (seeded): several client apps |
| ``none`` | no cap (vLLM then allows up to ``max_model_len - prompt``) |

The pod generates the trace's output length clipped to ``max_tokens``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.engine.errors import ConfigError

DEFAULT_MAX_TOKENS_POLICY = "fixed:1024"
FLAG = "--max-tokens-policy"


@dataclass(frozen=True)
class MaxTokensPolicy:
    spec: str
    kind: str
    value: float = 0.0
    choices: tuple[tuple[int, float], ...] = ()

    @classmethod
    def parse(cls, spec: str) -> MaxTokensPolicy:
        kind, _, arg = spec.strip().partition(":")
        if kind == "none" and not arg:
            return cls(spec, kind)
        if kind == "fixed":
            return cls(spec, kind, float(_positive_int(arg, spec)))
        if kind == "multiple":
            return cls(spec, kind, _positive_float(arg, spec))
        if kind == "choice":
            return cls(spec, kind, choices=_choices(arg, spec))
        raise ConfigError(f"{FLAG} {spec!r}: expected fixed:N, multiple:K, choice:N=W,... or none")

    def sampler(self, outputs: Sequence[int], seed: int = 0) -> Callable[[], int | None]:
        """A draw per request; ``outputs`` are the replayed trace's output lengths (for ``multiple``)."""
        if self.kind == "none":
            return lambda: None
        if self.kind == "fixed":
            cap = int(self.value)
            return lambda: cap
        if self.kind == "multiple":
            typical = statistics.median(outputs) if outputs else 1
            cap = max(1, math.ceil(self.value * typical))
            return lambda: cap
        rng = random.Random(seed * 104729 + 3)
        values = [v for v, _ in self.choices]
        weights = [w for _, w in self.choices]
        return lambda: rng.choices(values, weights)[0]


def _positive_int(text: str, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{FLAG} {spec!r}: {text!r} is not an integer") from None
    if value < 1:
        raise ConfigError(f"{FLAG} {spec!r}: the cap must be >= 1")
    return value


def _positive_float(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{FLAG} {spec!r}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{FLAG} {spec!r}: the multiple must be > 0")
    return value


def _choices(text: str, spec: str) -> tuple[tuple[int, float], ...]:
    out = []
    for part in text.split(","):
        cap, eq, weight = part.partition("=")
        out.append((_positive_int(cap, spec), _positive_float(weight, spec) if eq else 1.0))
    return tuple(out)
