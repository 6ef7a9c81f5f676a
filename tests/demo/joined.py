"""Joined requests (``demo.truth.Joined``) built to a given coverage, for the tests of ``demo.truth`` and
``demo.verdict``."""

from __future__ import annotations

from demo.truth import Joined


def run(n: int, covered: float, *, raw_covered: float | None = None, phase: str = "trained", pool: str = "short",
        start: float = 0.0, predicted: float = 100.0) -> list[Joined]:
    """``n`` requests one second apart from ``start``, the first ``round(covered * n)`` covered (measured half the
    prediction, the rest 1.5x it), on two pods; ``raw_covered``: the share the raw model covered, if different."""
    out = []
    for i in range(n):
        ok = i < round(covered * n)
        raw_ok = ok if raw_covered is None else i < round(raw_covered * n)
        measured = predicted * (0.5 if ok else 1.5)
        raw = predicted if raw_ok == ok else (measured * (1.2 if raw_ok else 0.8))
        both = {"ttft": predicted, "tpot": predicted}
        out.append(Joined(f"{pool}-r{start + i}", pool, f"http://pod-{i % 2}", start + i, both,
                          {"ttft": raw, "tpot": raw}, {"ttft": measured, "tpot": measured}, None, None, phase))
    return out


def dense(coverages: list[float], per_window: int = 40, pool: str = "short") -> list[Joined]:
    """``per_window`` trained requests per 10 s from t = 0, each 10 s window covered as given."""
    out = []
    for w, covered in enumerate(coverages):
        for i in range(per_window):
            ok = i < round(covered * per_window)
            both = {"ttft": 100.0, "tpot": 100.0}
            measured = {"ttft": 50.0 if ok else 150.0, "tpot": 50.0 if ok else 150.0}
            out.append(Joined(f"{pool}-r{w}-{i}", pool, "http://pod-0", 10.0 * w + 10.0 * i / per_window, both,
                              both, measured, None, None, "trained"))
    return out
