"""The Surface B auth-failure throttle (hooks.md §2 step 5): sliding window, then a lockout."""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from hookgate.clock import Clock
from hookgate.config.settings import AuthThrottleSettings

MAX_TRACKED_CLIENTS = 16_384


@dataclass(slots=True)
class _Entry:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0


class AuthThrottle:
    """Per client IP: failures within ``windowSeconds``; reaching ``maxFailures`` locks the client out.

    In-process; the least recently seen clients are forgotten beyond a fixed bound so memory stays flat.
    """

    def __init__(self, settings: AuthThrottleSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def locked_for(self, client: str) -> int:
        """Seconds of lockout left (ceil, ≥ 1), or 0 when the client is not locked out."""
        entry = self._entries.get(client)
        if entry is None:
            return 0
        # seen: a locked-out client that keeps trying was the least recently seen after a spray of
        # 16 384 other addresses (only failures moved an entry), and forgot its lockout first
        self._entries.move_to_end(client)
        remaining = entry.locked_until - self._clock.monotonic()
        return max(1, math.ceil(remaining)) if remaining > 0 else 0

    def record_failure(self, client: str) -> bool:
        """Record one failure; ``True`` when this failure started a lockout."""
        now = self._clock.monotonic()
        entry = self._entries.get(client)
        if entry is None:
            entry = self._entries[client] = _Entry()
            if len(self._entries) > MAX_TRACKED_CLIENTS:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(client)
        window_start = now - self.settings.window_seconds
        failures = entry.failures
        while failures and failures[0] <= window_start:
            failures.popleft()
        failures.append(now)
        if len(failures) >= self.settings.max_failures:
            entry.locked_until = now + self.settings.lockout_seconds
            failures.clear()
            return True
        return False

    def record_success(self, client: str) -> None:
        """A match clears the client's failure history and any lockout."""
        self._entries.pop(client, None)
