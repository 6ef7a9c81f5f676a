"""Pool classifier: thresholds, context limit, bytes→tokens EMA, output history percentiles."""

from __future__ import annotations

import pytest

from router_client.classifier import BytesPerToken, OutputHistory, PoolClassifier
from router_client.config import ClassifierConfig, PoolConfig
from router_client.router import RequestInfo

POOLS = [PoolConfig(name="short", pods=["http://s"], max_context=4096),
         PoolConfig(name="long", pods=["http://l"], max_context=32768)]

CASES = [
    # (name, prompt, max_tokens, expected pool, reason)
    ("small request", 500, 100, "short", "short"),
    ("output over 512", 100, 600, "long", "output"),
    ("output exactly 512 stays short", 100, 512, "short", "short"),
    ("total over 2048", 1900, 200, "long", "total"),
    ("total exactly 2048 stays short", 1848, 200, "short", "short"),
    ("no max_tokens: default 256 expected", 1700, None, "short", "short"),
    ("no max_tokens: default pushes total over", 1800, None, "long", "total"),
    ("prompt+max_tokens beyond short context", 3000, 1200, "long", "context"),
]


@pytest.mark.parametrize(("name", "prompt", "max_tokens", "pool", "reason"), CASES, ids=[c[0] for c in CASES])
def test_classify_table(name: str, prompt: int, max_tokens: int | None, pool: str, reason: str) -> None:
    clf = PoolClassifier(ClassifierConfig(), POOLS)
    budget = clf.classify(RequestInfo("/v1/completions", 0, prompt_tokens=prompt, max_tokens=max_tokens))
    assert (budget.pool, budget.reason) == (pool, reason)
    assert not budget.estimated


def test_context_always_wins_even_without_total_threshold() -> None:
    clf = PoolClassifier(ClassifierConfig(total_threshold_tokens=None, output_threshold_tokens=10_000), POOLS)
    assert clf.classify_tokens(4000, 50, 200) == ("long", "context")
    assert clf.classify_tokens(3000, 50, 200) == ("short", "short")


def test_single_pool_takes_everything() -> None:
    clf = PoolClassifier(ClassifierConfig(), POOLS[:1])
    assert clf.classify_tokens(100_000, 5000, None) == ("short", "single")


EMA_CASES = [
    # (name, observations (bytes, tokens), expected ema)
    ("default before data", [], 4.0),
    ("first observation replaces the default", [(600, 100)], 6.0),
    ("EMA with alpha 0.5", [(600, 100), (200, 100)], 4.0),
    ("zero tokens ignored", [(600, 100), (500, 0)], 6.0),
]


@pytest.mark.parametrize(("name", "obs", "want"), EMA_CASES, ids=[c[0] for c in EMA_CASES])
def test_bytes_per_token_ema(name: str, obs: list[tuple[int, int]], want: float) -> None:
    ema = BytesPerToken(default=4.0, alpha=0.5)
    for b, t in obs:
        ema.observe("/v1/chat/completions", b, t)
    assert ema.get("/v1/chat/completions") == pytest.approx(want)
    assert ema.get("/v1/completions") == 4.0


def test_estimate_learned_from_usage_per_route() -> None:
    clf = PoolClassifier(ClassifierConfig(bytes_per_token_alpha=1.0), POOLS)
    chat = RequestInfo("/v1/chat/completions", body_bytes=8000)
    assert clf.classify(chat).prompt_tokens == 2000 and clf.classify(chat).estimated
    clf.observe(chat, prompt_tokens=1000, output_tokens=10)  # chat bodies: 8 bytes/token
    assert clf.classify(chat).prompt_tokens == 1000
    assert clf.classify(RequestInfo("/v1/completions", body_bytes=8000)).prompt_tokens == 2000


HIST_CASES = [
    # (name, outputs seen, max_tokens, expected output)
    ("too little history: max_tokens", [10] * 5, 1000, 1000),
    ("p90 caps max_tokens", list(range(1, 101)), 1000, 90),
    ("max_tokens below the cap wins", list(range(1, 101)), 50, 50),
    ("no max_tokens: p90", list(range(1, 101)), None, 90),
    ("no max_tokens, no history: default", [], None, 256),
]


@pytest.mark.parametrize(("name", "outputs", "max_tokens", "want"), HIST_CASES, ids=[c[0] for c in HIST_CASES])
def test_expected_output_history(name: str, outputs: list[int], max_tokens: int | None, want: int) -> None:
    clf = PoolClassifier(ClassifierConfig(history_min_samples=20), POOLS)
    info = RequestInfo("/v1/completions", 100, prompt_tokens=10, max_tokens=max_tokens)
    for n in outputs:
        clf.observe(info, None, n)
    assert clf.expected_output("/v1/completions", None, max_tokens) == want


def test_system_prompt_history_preferred_over_route() -> None:
    clf = PoolClassifier(ClassifierConfig(history_min_samples=3, output_percentile=75), POOLS)
    for n in (1000, 1000, 1000, 1000):
        clf.observe(RequestInfo("/v1/chat/completions", 1, system_prompt_hash="essay"), None, n)
    for n in (10, 10, 10, 10, 10, 10, 10, 10):
        clf.observe(RequestInfo("/v1/chat/completions", 1, system_prompt_hash="yesno"), None, n)
    assert clf.expected_output("/v1/chat/completions", "essay", None) == 1000
    assert clf.expected_output("/v1/chat/completions", "yesno", 4000) == 10
    assert clf.expected_output("/v1/chat/completions", "unknown", None) == 1000  # route P75 of 12 samples


def test_output_history_bounded() -> None:
    hist = OutputHistory(size=3, max_keys=2)
    for key in ("a", "b", "c"):
        for n in (1, 2, 3, 4):
            hist.observe(key, n)
    assert hist.percentile("a", 50, 1) is None  # evicted (LRU over keys)
    assert hist.percentile("c", 100, 3) == 4 and hist.percentile("c", 1, 3) == 2  # last 3 kept
