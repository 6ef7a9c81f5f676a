"""The trainer tests' one prior fit per process (``tests/trainer/prior_cache.py``): a fresh fit's, copied."""

from __future__ import annotations

from shared.features import FeatureSpec
from tests.trainer.prior_cache import fit_prior_once
from trainer import service
from trainer.prior import fit_prior

SPEC = FeatureSpec()


def test_the_memo_gives_a_fresh_fits_bytes_and_entries() -> None:
    fresh = fit_prior(SPEC, (0.5, 0.9), 0.9)
    cached = fit_prior_once(SPEC, (0.5, 0.9), 0.9)
    assert cached.keys() == fresh.keys()
    for name, (files, entry) in fresh.items():
        assert cached[name][0] == files and cached[name][1] == entry, name


def test_each_call_gets_its_own_copy() -> None:
    first, second = fit_prior_once(SPEC), fit_prior_once(SPEC)
    assert first == second and first is not second
    assert all(first[name][0] is not second[name][0] for name in first)


def test_in_process_trainers_use_the_memo() -> None:
    assert service.fit_prior is fit_prior_once
