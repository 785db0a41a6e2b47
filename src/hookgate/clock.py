"""Injected time and ids: every "now" and every generated id comes through here."""

from __future__ import annotations

import os
import threading
import time
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


class _RandomPool:
    """OS CSPRNG bytes fetched 4 KiB at a time: one getrandom() call serves 256 ids.

    ``uuid.uuid4()`` makes one system call per id, which costs tens of microseconds on some VMs.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._buf = b""
        self._pos = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._pos + n > len(self._buf):
                self._buf = os.urandom(self._size)
                self._pos = 0
            chunk = self._buf[self._pos : self._pos + n]
            self._pos += n
            return chunk


_pool = _RandomPool()


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG (pooled)."""
    return _pool.take(n)


def new_id() -> str:
    """A fresh UUID v4 string (formatted directly: ``uuid.UUID`` costs ~2 µs per id)."""
    b = bytearray(_pool.take(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return uuid_text(b.hex())


def uuid_text(h: str) -> str:
    """32 lowercase hex digits → the canonical dashed UUID string."""
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
