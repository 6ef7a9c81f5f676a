"""The latency models of a P/D cluster, retrained in virtual time from both legs of every request.

Rows (:mod:`sim.cluster.disagg`): a prefill leg (``pod_type`` ``prefill``: TTFT = arrival → the prefill pod's
token), a decode leg (``decode``: TTFT = reaching the decode pod → first token, its TPOT), a whole request
(``""``). ``shared`` fits one model on all of them with ``pod_type`` as a feature; ``split`` fits one model per
role: prefill legs, and decode legs + whole requests. A bundle holds both models, so in ``split`` a prefill
row carries the request's TPOT (the prefill model's TPOT is never read) to let its TPOT model train.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.columns import to_columns
from shared.features import FeatureRow
from sim.cluster.policy import Completion
from sim.policies.pd.roles import PREFILL
from sim.policies.retrainer import InProcessRetrainer, RetrainSettings

Row = Mapping[str, float | int | str]
ALL = "all"


class RoleModels:
    def __init__(self, settings: RetrainSettings, split: bool) -> None:
        self.split = split
        self.trainers = {PREFILL: InProcessRetrainer(settings), "rest": InProcessRetrainer(settings)} if split \
            else {ALL: InProcessRetrainer(settings)}
        self.retrains = 0

    def _trainer(self, pod_type: str) -> InProcessRetrainer:
        if not self.split:
            return self.trainers[ALL]
        return self.trainers[PREFILL if pod_type == PREFILL else "rest"]

    def observe(self, c: Completion) -> None:
        """Both legs' rows of a completed request (one row when it was served whole)."""
        if c.prefill is not None:
            row = dict(c.prefill.sample)
            if self.split:
                row["actual_tpot_ms"] = c.tpot_ms
            self._trainer(PREFILL).add(row)
        self._trainer(str(c.sample["pod_type"])).add(c.sample)

    def retrain(self, now: float) -> None:
        for trainer in self.trainers.values():
            self.retrains += trainer.retrain(now)

    def predict(self, pod_type: str, rows: Sequence[FeatureRow]) -> list[tuple[float, float]] | None:
        """``(TTFT, TPOT)`` per row, every row in the role ``pod_type``; None before that role's first fit."""
        model = self._trainer(pod_type).model
        if model is None or not rows:
            return None
        cols = to_columns(rows, ["pods"])
        return list(zip(model.predict("ttft", cols).tolist(), model.predict("tpot", cols).tolist(), strict=True))
