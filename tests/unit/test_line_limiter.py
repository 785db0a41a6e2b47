"""LineLimiter: at most one log line per key per interval, counting what it held back."""

from __future__ import annotations

import time

from hookgate.obs.logging import LineLimiter


def test_one_line_per_key_per_interval_with_the_count_held_back() -> None:
    limiter = LineLimiter(0.2)
    assert limiter.due("a") == 1  # the first occurrence is written
    assert limiter.due("a", 3) is None  # held back within the interval
    assert limiter.due("a") is None
    assert limiter.due("b", 2) == 2  # keys are independent
    time.sleep(0.25)
    assert limiter.due("a") == 5  # 3 + 1 held back, and this one
    assert limiter.due("a") is None


def test_past_its_bound_the_key_whose_line_is_oldest_is_forgotten() -> None:
    """The table once started over when full: with more keys active than its bound, every key was
    new again and every occurrence logged (5 000 locked-out IPs asked twice in 6 s: 9 943 lines of
    hook.auth_throttled for at most 5 000). Now only the key whose line is oldest is forgotten."""
    limiter = LineLimiter(60.0, max_keys=2)
    assert limiter.due("a") == 1 and limiter.due("b") == 1
    assert limiter.due("a") is None  # (held back: a's place by the time of its line stays)
    assert limiter.due("c") == 1  # full: a, whose line is oldest, is forgotten
    assert limiter.due("b") is None and limiter.due("c") is None
    assert limiter.due("a") == 1  # a's line was forgotten with it (and b's now is the oldest)
    assert limiter.due("c") is None



def test_a_forced_line_stands_for_what_was_held_back() -> None:
    """A line that must be written (a job giving up) counts the occurrences held back before it, and
    the interval starts again from it: the lines add up to every occurrence."""
    limiter = LineLimiter(60.0)
    assert limiter.due("a") == 1
    assert limiter.due("a", 2) is None
    assert limiter.force("a") == 3  # 2 held back, and this one
    assert limiter.due("a") is None  # a new interval
    assert limiter.force("a") == 2
    assert limiter.force("b", 4) == 4
