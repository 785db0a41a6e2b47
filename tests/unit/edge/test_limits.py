from __future__ import annotations

from hookgate.clock import ManualClock
from hookgate.edge.limits import FixedWindowLimiter


def test_a_window_allows_its_requests_then_counts_down_its_retry_after() -> None:
    clock = ManualClock()
    limiter = FixedWindowLimiter(clock)
    assert [limiter.hit("k", 2, 60) for _ in range(3)] == [0, 0, 60]
    clock.advance(59.5)
    assert limiter.hit("k", 2, 60) == 1  # ceil, at least 1
    clock.advance(0.5)
    assert limiter.hit("k", 2, 60) == 0  # a new window
    assert limiter.hits("k") == 1 and limiter.hit("other", 2, 60) == 0


def test_a_reload_that_shortens_the_window_ends_the_open_one_sooner() -> None:
    """The window is the configured one: after a reload from 3 600 s to 1 s a client is not held to
    the old hour (webhooks.md §2.1: the limit is `maxRequests` per `windowSeconds`)."""
    clock = ManualClock()
    limiter = FixedWindowLimiter(clock)
    assert [limiter.hit("k", 1, 3600) for _ in range(2)] == [0, 3600]
    assert limiter.hit("k", 1, 1) == 1  # the same open window, now of 1 s
    clock.advance(1.0)
    assert limiter.hit("k", 1, 1) == 0


def test_a_reload_that_lengthens_the_window_does_not_reopen_an_ended_one() -> None:
    """A client told `Retry-After: 9` that waits 9 s must get through; after a reload from 10 s to 60 s
    the window is measured from its old start with the new length, so the ended window is open again
    (and counts the old hits): 429 with `Retry-After: 50`."""
    clock = ManualClock()
    limiter = FixedWindowLimiter(clock)
    assert limiter.hit("k", 1, 10) == 0
    clock.advance(1.0)
    assert limiter.hit("k", 1, 10) == 9
    clock.advance(9.0)  # the window has ended: Retry-After honoured
    assert limiter.hit("k", 1, 60) == 0
