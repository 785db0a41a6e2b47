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


def test_the_key_table_starts_over_at_its_bound() -> None:
    limiter = LineLimiter(60.0, max_keys=2)
    assert limiter.due("a") == 1 and limiter.due("b") == 1
    assert limiter.due("c") == 1  # the table was full: cleared, then c recorded
    assert limiter.due("a") == 1  # a's line was forgotten with it
    assert limiter.due("c") is None
