"""Injected time and ids: every "now" and every generated id comes through here."""

from __future__ import annotations

import time
import uuid
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time as integer epoch milliseconds."""

    def monotonic(self) -> float:
        """Monotonic seconds for durations and windows."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, now_ms: int = 1_790_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 1000.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now_ms += int(seconds * 1000)
        self._mono += seconds


def new_id() -> str:
    """A fresh UUID v4 string."""
    return str(uuid.uuid4())
