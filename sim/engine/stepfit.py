"""Step-time coefficients fitted to a real engine (measured-profile mode), in the step model's own form.

``t = overhead + per_seq * seqs + token_ms(tokens) + c_pf * sum(q * (ctx + q/2)) + c_dec * sum(kv)
+ c_uniq * unique_kv``, the formula of :mod:`sim.engine.steptime`, with every term measured on the engine instead
of derived from GPU constants (``unique_kv``: the distinct cached tokens the step's decodes read; on a CPU a block
shared by many sequences of the batch is read from cache once, a distinct one from memory): ``token_ms`` is
piecewise linear through ``knots`` (``(tokens, ms)``, ``token_ms(1) = 0``: the cost of one token is in
``overhead``), extended at the slope of the last segment.

``frontend_ms`` is not part of a step: the time from the client sending a request to the scheduler seeing
it, plus the first token's way back (HTTP, API server, IPC). The simulator delays a request's admission by
it, so it adds to TTFT and E2E but not to TPOT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sim.engine.errors import ConfigError


@dataclass(frozen=True)
class StepFit:
    frontend_ms: float
    overhead_ms: float
    per_seq_ms: float
    prefill_ms_per_qk: float
    decode_ms_per_kv_token: float
    knots: tuple[tuple[int, float], ...]
    """``(batch tokens, ms)`` of the token-dependent part, first knot ``(1, 0.0)``."""
    noise_std: float = 0.0
    """Relative spread of single decode steps seen on the engine (the simulator's step noise)."""
    rel_rmse: float = 0.0
    """Root-mean-square relative error of the fit on the measured points."""
    decode_ms_per_unique_kv_token: float = 0.0
    """ms per distinct cached token the decodes of a step read (0: profiles measured before it was)."""

    def __post_init__(self) -> None:
        tokens = [k[0] for k in self.knots]
        if len(tokens) < 2 or tokens[0] != 1 or any(b <= a for a, b in zip(tokens, tokens[1:], strict=False)):
            raise ConfigError(f"step fit knots must start at 1 token and increase, got {tokens}")

    def token_ms_table(self, max_tokens: int) -> tuple[float, ...]:
        """``token_ms`` for 0..max_tokens batch tokens (index 0 = 0)."""
        xs = np.array([k[0] for k in self.knots], dtype=np.float64)
        ys = np.array([k[1] for k in self.knots], dtype=np.float64)
        grid = np.arange(max_tokens + 1, dtype=np.float64)
        table = np.interp(grid, xs, ys)
        beyond = grid > xs[-1]
        if beyond.any():
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            table[beyond] = ys[-1] + slope * (grid[beyond] - xs[-1])
        table[0] = 0.0
        return tuple(float(x) for x in table)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["knots"] = [[t, ms] for t, ms in self.knots]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StepFit:
        try:
            knots = tuple((int(t), float(ms)) for t, ms in raw["knots"])
            return cls(float(raw["frontend_ms"]), float(raw["overhead_ms"]), float(raw["per_seq_ms"]),
                       float(raw["prefill_ms_per_qk"]), float(raw["decode_ms_per_kv_token"]), knots,
                       float(raw.get("noise_std", 0.0)), float(raw.get("rel_rmse", 0.0)),
                       float(raw.get("decode_ms_per_unique_kv_token", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"bad step fit in profile: {exc!r}") from None
