"""A job's outcome committed until it is stored (operations.md §4.2: a store that fails for a while)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from hookgate.errors import StoreUnavailable
from hookgate.runtime.ports import RuntimeTx
from hookgate.store.base import Store

T = TypeVar("T")

# Waits between tries (the last repeats), and how long a job keeps trying.
SETTLE_WAITS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
SETTLE_FOR_S = 300.0


async def commit_outcome(store: Store, fn: Callable[[RuntimeTx], T]) -> T:
    """``store.flow_write(fn)``, tried again while the store fails (a full disk, an I/O error).

    The job holds what cannot be had again for free: a model's reply, a message a chat API has taken.
    Given up at once, the job's lease ran out and its next attempt called the model again (a run's
    second failure ended it ``lost``) or sent the message twice. Its lease is renewed meanwhile (the
    worker's ``_with_lease``: nothing else takes the job), and a cancellation (shutdown, a lease that
    ran out) ends the tries. After ``SETTLE_FOR_S`` the failure is raised, as it was at once before.
    A failed commit wrote nothing (``hookgate.store.sqlite.writer``), so ``fn`` runs whole again."""
    deadline = time.monotonic() + SETTLE_FOR_S
    tries = 0
    while True:
        try:
            return await store.flow_write(fn)
        except StoreUnavailable:
            wait = SETTLE_WAITS_S[min(tries, len(SETTLE_WAITS_S) - 1)]
            if time.monotonic() + wait > deadline:
                raise
            tries += 1
            await asyncio.sleep(wait)
