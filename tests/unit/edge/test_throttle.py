from __future__ import annotations

from hookgate.clock import ManualClock
from hookgate.config.settings import AuthThrottleSettings
from hookgate.edge.throttle import MAX_TRACKED_CLIENTS, AuthThrottle


def make() -> tuple[AuthThrottle, ManualClock]:
    clock = ManualClock()
    return AuthThrottle(AuthThrottleSettings(max_failures=3, window_seconds=60, lockout_seconds=60), clock), clock


def test_lockout_starts_on_the_failure_that_reaches_the_limit() -> None:
    t, _ = make()
    assert not t.record_failure("1.2.3.4")
    assert not t.record_failure("1.2.3.4")
    assert t.locked_for("1.2.3.4") == 0
    assert t.record_failure("1.2.3.4")
    assert t.locked_for("1.2.3.4") == 60
    assert t.locked_for("5.6.7.8") == 0


def test_retry_after_counts_down_and_is_at_least_one() -> None:
    t, clock = make()
    for _ in range(3):
        t.record_failure("c")
    clock.advance(59.5)
    assert t.locked_for("c") == 1
    clock.advance(0.6)
    assert t.locked_for("c") == 0


def test_sliding_window_forgets_old_failures() -> None:
    t, clock = make()
    t.record_failure("c")
    t.record_failure("c")
    clock.advance(61)
    assert not t.record_failure("c")
    assert not t.record_failure("c")
    assert t.record_failure("c")


def test_success_clears_history_and_lockout() -> None:
    t, _ = make()
    for _ in range(3):
        t.record_failure("c")
    assert t.locked_for("c")
    t.record_success("c")
    assert t.locked_for("c") == 0
    assert not t.record_failure("c")


def test_a_locked_out_client_that_keeps_trying_is_not_forgotten_first() -> None:
    """docs/hooks.md: at most 16 384 client IPs are tracked, the least recently seen forgotten first.
    A locked-out client is seen on each request it makes (each answered 429): only failures counted
    as seen, so after a spray of 16 384 other addresses the locked-out one, still trying, was forgotten
    first and got 401s again instead of 429s."""
    t, _ = make()
    for _ in range(3):
        t.record_failure("attacker")
    for i in range(MAX_TRACKED_CLIENTS - 1):
        t.record_failure(f"spray-{i}")
    assert t.locked_for("attacker") == 60  # seen now, after every sprayed address
    t.record_failure("one-more")  # past the bound: the least recently seen is forgotten
    assert t.locked_for("attacker") == 60
    assert "spray-0" not in t._entries and len(t._entries) == MAX_TRACKED_CLIENTS
