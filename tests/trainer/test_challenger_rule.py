"""Champion / challenger: the paired comparison of per-row losses on the newest rows."""

from __future__ import annotations

import numpy as np

from trainer.evaluate import not_worse, row_losses


def test_pinball_and_squared_row_losses() -> None:
    y, pred = np.array([10.0, 10.0]), np.array([8.0, 12.0])
    assert np.allclose(row_losses(pred, y, 0.9, "quantile"), [0.9 * 2, 0.1 * 2])
    assert row_losses(pred, y, 0.9, "mean").tolist() == [4.0, 4.0]


def test_a_challenger_within_noise_of_the_live_model_is_not_worse() -> None:
    rng = np.random.default_rng(1)
    live = rng.exponential(1.0, 2000)
    challenger = live + rng.normal(0.01, 0.5, 2000)  # slightly higher mean loss, well within noise
    assert float(challenger.mean()) > float(live.mean())
    assert not_worse(challenger, live, 2.0)


def test_a_clearly_worse_challenger_is_worse() -> None:
    rng = np.random.default_rng(2)
    live = rng.exponential(1.0, 2000)
    assert not not_worse(live * 1.5, live, 2.0)
    assert not_worse(live * 0.9, live, 2.0)


def test_tiny_holdouts_fall_back_to_the_plain_comparison() -> None:
    assert not_worse(np.array([1.0]), np.array([1.0]), 2.0)
    assert not not_worse(np.array([1.1]), np.array([1.0]), 2.0)
