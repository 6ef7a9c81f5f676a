"""The fit budget: how many rows each model's location boosters are fitted on, adapted to the time a fit takes.

A retrain cycle must end within its interval (10 s) — and the whole cycle, both models with every candidate,
should take ≤ 3 s at the window cap, so that publishes stay ~10 s apart even under sustained ingest. The
location boosters (one per candidate, squared error on ``log1p`` latency over every fit row) are the part of a
fit whose cost grows with the window; the quantile booster already works on a fixed subsample
(``LATENCY_FIT_QUANTILE_ROWS``). So, per model, after each fit:

* a fit that took longer than ``budget_s`` (wall) makes the next one fit the locations on fewer rows: the
  location time measured is cut by the overrun, rows scaled in proportion (location cost ∝ rows), never below
  ``min_rows``;
* a fit under ``GROW_BELOW`` × the budget lets the rows grow back by ``GROW`` × until the whole window is used.

Every candidate is still fitted every cycle (selection is not skipped); what a fit used is in the manifest
entry (``location_fit_rows`` of ``fit_rows``) and in the retrain log line. ``budget_s`` = 0 turns this off.
"""

from __future__ import annotations

from dataclasses import replace

from shared.bundle import ModelEntry
from shared.features import MODEL_NAMES
from trainer.fit import FitParams

GROW_BELOW = 0.75
GROW = 1.25
SAFETY = 0.9


class FitBudget:
    def __init__(self, budget_s: float, min_rows: int) -> None:
        self.budget_s, self.min_rows = budget_s, min_rows
        self._rows: dict[str, int | None] = dict.fromkeys(MODEL_NAMES)

    def rows(self, name: str) -> int | None:
        """Location rows for ``name``'s next fit (None: every fit row)."""
        return self._rows[name]

    def params(self, name: str, params: FitParams) -> FitParams:
        return replace(params, location_rows=self._rows[name])

    def observe(self, name: str, entry: ModelEntry) -> None:
        """Adapt to a finished fit (its manifest entry: ``fit_seconds``, ``location_seconds``, rows used)."""
        if self.budget_s <= 0:
            return
        seconds, location_s = entry.fit_seconds, entry.location_seconds
        used, total = entry.location_fit_rows, entry.fit_rows
        if seconds > self.budget_s and used > 0 and location_s > 0:
            allowed = max(location_s - (seconds - self.budget_s), 0.0) * SAFETY
            self._rows[name] = max(self.min_rows, int(used * allowed / location_s))
        elif seconds < GROW_BELOW * self.budget_s and self._rows[name] is not None:
            grown = int(used * GROW)
            self._rows[name] = None if grown >= total else max(grown, self.min_rows)
