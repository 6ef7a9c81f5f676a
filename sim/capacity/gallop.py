"""The smallest pod count that passes a monotone test, found by galloping from a guess and bisecting.

:func:`smallest_ok` is a generator: it yields the count to test next and is sent the outcome; its
return value (``StopIteration.value``) is the smallest passing count, or None if ``cap`` fails. From a
passing guess it steps down 1, 2, 4, … until a failure; from a failing one up 1, 2, 4, … (at most
``cap``); then it bisects. A guess one pod off costs two or three tests.
"""

from __future__ import annotations

from collections.abc import Generator

Search = Generator[int, bool, int | None]


def smallest_ok(guess: int, cap: int) -> Search:
    n = min(max(guess, 1), cap)
    lo, hi, step = 0, cap + 1, 1
    if (yield n):
        hi = n
        while hi - lo > 1:
            n = max(hi - step, lo + 1)
            step *= 2
            if (yield n):
                hi = n
            else:
                lo = n
                break
    else:
        lo = n
        while hi > cap:
            if lo >= cap:
                return None
            n = min(lo + step, cap)
            step *= 2
            if (yield n):
                hi = n
            else:
                lo = n
    while hi - lo > 1:
        n = (lo + hi) // 2
        if (yield n):
            hi = n
        else:
            lo = n
    return hi
