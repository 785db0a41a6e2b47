"""The worker threads of synchronous transforms: one for quick calls, more for slow ones, deadlines."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from hookgate.hooks.transforms_loader import _Inbox, _Pool


def quick(x: int) -> int:
    return x * 2


def sleepy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


async def test_quick_calls_share_one_thread_and_all_answer() -> None:
    pool = _Pool()
    results = await asyncio.gather(*(pool.call(quick, i, 5.0) for i in range(500)))
    assert results == [i * 2 for i in range(500)]
    assert pool._threads == 1


async def test_slow_calls_get_more_threads_and_run_side_by_side() -> None:
    pool = _Pool()
    started = time.monotonic()
    results = await asyncio.gather(*(pool.call(sleepy, 0.3, 5.0) for _ in range(4)))
    elapsed = time.monotonic() - started
    assert results == [0.3] * 4
    assert elapsed < 0.9  # one after the other would take 1.2 s
    assert pool._threads == 4


async def test_a_stuck_call_does_not_hold_up_the_next_one() -> None:
    pool = _Pool()
    release = threading.Event()
    stuck = asyncio.ensure_future(pool.call(lambda _: release.wait(), None, 0.2))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    assert await pool.call(quick, 21, 5.0) == 42  # no other request arrives: the pool looks again itself
    assert time.monotonic() - started < 0.1
    with pytest.raises(TimeoutError):
        await stuck
    release.set()


async def test_deadline_fails_the_call_within_a_tick() -> None:
    pool = _Pool()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await pool.call(sleepy, 1.0, 0.2)
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 0.2 + _Inbox.TICK + 0.1  # scheduling slack on a loaded CI machine


async def test_errors_reach_the_caller() -> None:
    def boom(_: object) -> None:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        await _Pool().call(boom, None, 1.0)
