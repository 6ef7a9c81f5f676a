"""The fit budget: a fit over it makes the next one fit the location on fewer rows, every candidate still fitted;
fits well under it let the rows grow back to the whole window."""

from __future__ import annotations

from shared.bundle import ModelEntry
from shared.features import FeatureSpec
from tests.trainer.test_fit_bundle import window_rows
from trainer.budget import FitBudget
from trainer.fit import FitParams
from trainer.fitted import fit_model

SPEC = FeatureSpec()


def entry(seconds: float, location_s: float, used: int, total: int) -> ModelEntry:
    return ModelEntry(file="ttft.ubj", fit_seconds=seconds, location_seconds=location_s, location_fit_rows=used,
                      fit_rows=total)


def test_an_overrun_cuts_the_location_rows_by_the_overrun_never_below_the_floor() -> None:
    budget = FitBudget(2.5, 20_000)
    assert budget.rows("ttft") is None
    budget.observe("ttft", entry(3.5, 1.5, 98_000, 98_000))  # 1 s over: the location may take 0.5 s (x 0.9)
    assert budget.rows("ttft") == int(98_000 * 0.5 * 0.9 / 1.5)
    assert budget.rows("tpot") is None  # per model
    budget.observe("ttft", entry(9.0, 1.0, 29_400, 98_000))
    assert budget.rows("ttft") == 20_000


def test_fits_well_under_the_budget_grow_back_to_every_row() -> None:
    budget = FitBudget(2.5, 20_000)
    budget.observe("tpot", entry(4.0, 2.0, 100_000, 100_000))
    rows = budget.rows("tpot")
    assert rows is not None and rows < 100_000
    budget.observe("tpot", entry(2.2, 0.5, rows, 100_000))  # within the budget, not well under: unchanged
    assert budget.rows("tpot") == rows
    for _ in range(20):
        current = budget.rows("tpot")
        budget.observe("tpot", entry(1.0, 0.3, current or 100_000, 100_000))
    assert budget.rows("tpot") is None


def test_off_means_every_row() -> None:
    budget = FitBudget(0.0, 20_000)
    budget.observe("ttft", entry(30.0, 20.0, 98_000, 98_000))
    assert budget.rows("ttft") is None


def test_a_capped_fit_uses_that_many_location_rows_and_every_candidate() -> None:
    params = FitParams(rounds=40, nthread=1, quantile_rows=2000)
    train, hold = window_rows(6000, 1), window_rows(800, 2)
    full = fit_model(SPEC, "ttft", train, hold, params)
    assert full.entry.location_fit_rows == full.entry.fit_rows > 3000
    budget = FitBudget(1.0, 1000)
    budget.observe("ttft", entry(2.0, 1.5, full.entry.fit_rows, full.entry.fit_rows))
    capped = fit_model(SPEC, "ttft", train, hold, budget.params("ttft", params))
    assert capped.entry.location_fit_rows == budget.rows("ttft") < full.entry.fit_rows
    assert set(capped.entry.selection) == {"base", *(c.name for c in params.candidates)}
    assert capped.entry.location_seconds > 0
