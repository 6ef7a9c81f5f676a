"""Fit configuration values that settings validate at start-up: candidate configurations and quantiles."""

from __future__ import annotations

import re
from dataclasses import dataclass

CANDIDATE_FORM = re.compile(r"^depth(\d{1,2})(-monotone)?(-window)?$")
LOSSES = ("l2", "l1")
"""How the physical base may be fitted (``trainer.base_fit``)."""


@dataclass(frozen=True)
class Candidate:
    """One tree configuration the retrain cycle may choose: ``depth6`` (trees of depth 6, a residual on the physical
    base), ``depth3-window`` (trees of depth 3 that learn the whole latency inside the training window, the base
    adding its growth past it: ``shared.base``). Every candidate's trees are monotone in the load features
    (``trainer.fit.MONOTONE_UP``); the ``-monotone`` suffix of older configurations is accepted and means the
    same."""

    max_depth: int
    window: bool = False

    @property
    def name(self) -> str:
        return f"depth{self.max_depth}" + ("-window" if self.window else "")

    @classmethod
    def parse(cls, text: str) -> Candidate:
        match = CANDIDATE_FORM.match(text.strip())
        if match is None or not 1 <= int(match.group(1)) <= 10:
            raise ValueError(f"fit candidate {text!r}: expected depth<1-10>[-window], e.g. depth3 or depth6-window")
        return cls(int(match.group(1)), bool(match.group(3)))


def parse_candidates(text: str) -> tuple[Candidate, ...]:
    candidates = tuple(Candidate.parse(part) for part in text.split(",") if part.strip())
    if not candidates:
        raise ValueError("at least one fit candidate is needed")
    if len({c.name for c in candidates}) != len(candidates):
        raise ValueError(f"fit candidates repeat: {text!r}")
    return candidates


def parse_served(text: str) -> tuple[float, ...]:
    """``"0.5,0.9,0.99"`` → sorted distinct quantiles in (0, 1)."""
    try:
        values = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"served quantiles {text!r}: expected numbers in (0, 1), e.g. 0.5,0.9,0.99") from None
    if not values or any(not 0 < q < 1 for q in values):
        raise ValueError(f"served quantiles {text!r}: expected numbers in (0, 1), e.g. 0.5,0.9,0.99")
    return tuple(values)


def parse_models(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """``"ttft,tpot"`` → the model names listed (empty: none), each one of ``known``."""
    names = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown model {bad[0]!r} in {text!r}: expected some of {', '.join(known)}")
    return names
