"""Recency weights: rows stored recently count more in the fit, old rows never count for nothing.

``w = floor + (1 − floor) × 0.5^(age / half_life)``, with age measured back from the newest row in
the window (so replays in virtual time and a trainer restarted after a pause behave alike). The
floor keeps the rare regimes the stratified window preserves (deep queues, cache hits) in play: in a
region where only old rows exist they still decide the trees there, weights only matter where old
and new rows compete. ``half_life_s = 0`` turns weighting off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Recency:
    half_life_s: float = 0.0
    floor: float = 0.25

    def weights(self, wall: np.ndarray, now: float) -> np.ndarray:
        if self.half_life_s <= 0 or not len(wall):
            return np.ones(len(wall))
        age = np.maximum(now - wall, 0.0)
        return self.floor + (1.0 - self.floor) * np.exp2(-age / self.half_life_s)
