"""Membership: the pods a pool offers the hot path as discovery changes them (pure, no I/O)."""

from __future__ import annotations

from router_client.config import PoolConfig
from router_client.membership import JOINING, LEAVING, SERVING, Change, Membership, PoolMembers

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"
DISCOVERED = PoolConfig(name="short", discovery={"dns": "vllm-short:8000", "refresh_s": 1})
STATIC = PoolConfig(name="long", pods=["http://l0:8000", "http://l1:8000"])


def test_static_pods_are_candidates_from_the_start() -> None:
    m = Membership([STATIC])
    assert m.pods("long") == ("http://l0:8000", "http://l1:8000")
    assert m.state("http://l0:8000") == SERVING and m.pool_of("http://l1:8000") == "long"
    assert m.peers("http://l0:8000") == m.pods("long") and m.peers("http://x") == ("http://x",)


def test_joining_pods_serve_after_their_first_scrape() -> None:
    pool = PoolMembers("short")
    assert pool.pods == ()
    assert pool.update([A, B]) == Change("short", (A, B), ())
    assert pool.pods == (A, B), "no pod serves yet: the joining ones are the candidates"
    assert pool.scraped(A) and pool.pods == (A,)
    assert pool.update([A, B, C]) == Change("short", (C,), ())
    assert pool.pods == (A,), "C (and B) only after a scrape"
    assert pool.scraped(C) and not pool.scraped(C) and pool.pods == (A, C)
    assert [pool.state(p) for p in (A, B, C)] == [SERVING, JOINING, SERVING]
    assert pool.counts() == {SERVING: 2, JOINING: 1, LEAVING: 0}


def test_a_pod_that_leaves_is_no_candidate_and_leaving_until_retired() -> None:
    m = Membership([DISCOVERED])
    m.update("short", [A, B])
    m.scraped([A, B])
    before = m.pods("short")
    assert m.update("short", [B]) == Change("short", (), (A,))
    assert m.pods("short") == (B,) and before == (A, B), "the old tuple is left as it was (a decision may hold it)"
    assert m.state(A) == LEAVING and m.pool_of(A) == "short" and m.scrape_targets() == (B,)
    assert m.all_pods() == [B, A]
    assert m.retire(A) == "short" and m.state(A) is None and m.pool_of(A) is None
    assert m.retire(A) is None and m.retire(B) is None, "only leaving pods are retired"


def test_pods_that_stay_keep_their_state_and_an_equal_set_changes_nothing() -> None:
    pool = PoolMembers("short")
    pool.update([A, B])
    pool.scraped(A)
    pool.scraped(B)
    tuple_before = pool.pods
    assert not pool.update([B, A, A]), "same set in another order, duplicates: no change"
    assert pool.pods is tuple_before
    assert pool.update([B, C]) == Change("short", (C,), (A,))
    assert pool.state(B) == SERVING, "B stayed: still serving, no new scrape needed"


def test_a_pod_that_comes_back_joins_again() -> None:
    pool = PoolMembers("short")
    pool.update([A, B])
    pool.scraped(A)
    pool.scraped(B)
    pool.update([B])
    assert pool.update([A, B]) == Change("short", (A,), ())
    assert pool.state(A) == JOINING and A not in pool.leaving and pool.pods == (B,)


def test_when_every_pod_is_replaced_the_new_ones_are_candidates_at_once() -> None:
    pool = PoolMembers("short")
    pool.update([A])
    pool.scraped(A)
    pool.update([B, C])
    assert pool.pods == (B, C) and pool.state(A) == LEAVING


def test_scrapes_of_strangers_and_leaving_pods_change_nothing() -> None:
    m = Membership([DISCOVERED, STATIC])
    m.update("short", [A, B])
    m.scraped([A, "http://stranger:1"])
    m.update("short", [A])
    m.scraped([B])
    assert m.state(B) == LEAVING and m.pods("short") == (A,)
    assert m.scrape_targets() == (A, "http://l0:8000", "http://l1:8000")
