"""The worker threads of synchronous transforms: one for quick calls, more for slow ones, deadlines."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from hookgate.hooks.transforms_loader import _Pool


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
    together = threading.Barrier(4, timeout=5)  # passes only when all four calls run at the same time

    def meet(_: None) -> int:
        return together.wait()

    results = await asyncio.gather(*(pool.call(meet, None, 10.0) for _ in range(4)))
    assert sorted(results) == [0, 1, 2, 3]
    assert pool._threads == 4


async def test_a_stuck_call_does_not_hold_up_the_next_one() -> None:
    pool = _Pool()
    release = threading.Event()
    stuck = asyncio.ensure_future(pool.call(lambda _: release.wait(30), None, 30.0))
    await asyncio.sleep(0.05)
    assert await pool.call(quick, 21, 5.0) == 42  # no other request arrives: the pool looks again itself
    assert not stuck.done()  # answered while the stuck call still holds its thread: not queued behind it
    release.set()
    assert await stuck is True


async def test_deadline_fails_the_call_within_a_tick() -> None:
    pool = _Pool()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await pool.call(sleepy, 1.0, 0.2)
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 0.9  # the deadline, not the call's own 1 s (slack for a loaded CI machine)


async def test_errors_reach_the_caller() -> None:
    def boom(_: object) -> None:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        await _Pool().call(boom, None, 1.0)


async def test_a_call_waiting_for_a_free_thread_is_not_timed_out_for_the_wait() -> None:
    """hooks.md §6.5 bounds a transform's call. With every thread held by slow calls (timed-out ones
    keep their thread until they return: 33 slow calls of one mapping did it), a quick call of
    another mapping failed with TimeoutError while it was only waiting; it now waits and runs."""
    pool = _Pool()
    pool.MAX_THREADS = 2
    loop = asyncio.get_running_loop()
    slow = [asyncio.ensure_future(pool.call(sleepy, 1.0, 0.3)) for _ in range(2)]
    await asyncio.sleep(0.1)  # both threads busy
    began = loop.time()
    assert await pool.call(quick, 21, 0.3) == 42
    assert loop.time() - began >= 0.5  # it waited for a thread, longer than its own timeout
    for call in slow:
        with pytest.raises(TimeoutError):
            await call
    assert pool._threads == 2


async def test_a_call_that_waits_too_long_for_a_thread_fails_and_never_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookgate.hooks import transforms_loader

    monkeypatch.setattr(transforms_loader._Inbox, "QUEUE_WAIT_MAX", 0.2)
    pool = _Pool()
    pool.MAX_THREADS = 1
    ran: list[int] = []
    slow = asyncio.ensure_future(pool.call(sleepy, 1.5, 5.0))
    await asyncio.sleep(0.1)
    with pytest.raises(TimeoutError):
        await pool.call(ran.append, 1, 0.2)  # 0.2 s of timeout + 0.2 s of waiting for a thread
    assert await slow == 1.5
    await asyncio.sleep(0.1)
    assert ran == []  # its request gave up: the thread that came free did not run it
