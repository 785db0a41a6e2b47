"""Surface A request limits (webhooks.md §2.1 steps 3 and 5, §2.2): fixed windows and in-flight slots."""

from __future__ import annotations

import math
from collections import OrderedDict

from hookgate.clock import Clock

MAX_TRACKED_KEYS = 4096


class FixedWindowLimiter:
    """Per key: a window opens with the first hit (or the first after the previous window ended);
    ``max_requests`` hits are allowed in it, every hit counts (rejected ones too). A reload that
    shortens ``window_seconds`` ends an open window sooner (it kept the length it started with, and
    its ``Retry-After``); one that lengthens it neither extends an open window nor revives an ended one.

    At most 4 096 keys are tracked; the least recently used is forgotten first.
    """

    def __init__(self, clock: Clock, max_keys: int = MAX_TRACKED_KEYS) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._windows: OrderedDict[str, list[float]] = OrderedDict()  # key → [start, end, hits]

    def hit(self, key: str, max_requests: int, window_seconds: float) -> int:
        """Count a hit; 0 when allowed, else the ``Retry-After`` seconds (ceil, ≥ 1)."""
        now = self._clock.monotonic()
        entry = self._windows.get(key)
        if entry is not None:
            entry[1] = min(entry[1], entry[0] + window_seconds)  # the window as configured now
        if entry is None or entry[1] <= now:
            entry = [now, now + window_seconds, 0.0]
            self._windows[key] = entry
            if len(self._windows) > self._max_keys:
                self._windows.popitem(last=False)
        self._windows.move_to_end(key)
        entry[2] += 1
        if entry[2] <= max_requests:
            return 0
        return max(1, math.ceil(entry[1] - now))

    def hits(self, key: str) -> int:
        """Hits counted in the key's current window (0 when none is open)."""
        entry = self._windows.get(key)
        return 0 if entry is None or entry[1] <= self._clock.monotonic() else int(entry[2])


class InFlightLimiter:
    """Concurrent requests per key; a slot is held until the response is written."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def acquire(self, key: str, limit: int) -> bool:
        count = self._counts.get(key, 0)
        if count >= limit:
            return False
        self._counts[key] = count + 1
        return True

    def release(self, key: str) -> None:
        count = self._counts.get(key, 0) - 1
        if count <= 0:
            self._counts.pop(key, None)
        else:
            self._counts[key] = count

    def __len__(self) -> int:
        return len(self._counts)
