"""A job's outcome committed until it is stored (operations.md §4.2: a store that fails for a while)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from hookgate.config.settings import Settings
from hookgate.errors import StoreUnavailable
from hookgate.obs.logging import LineLimiter, failure_text
from hookgate.runtime.ports import RuntimeTx
from hookgate.store.base import Store

T = TypeVar("T")

# Waits between tries (the last repeats), and the longest a job tries (a lease may be a day long).
SETTLE_WAITS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
SETTLE_FOR_MAX_S = 60.0
STORE_ERROR_LOG_S = 10.0
_store_errors = LineLimiter(STORE_ERROR_LOG_S, 16)  # the worker's store.error lines, per operation


def log_store_error(log: Any, operation: str, exc: BaseException, *, last: bool = False, **fields: Any) -> None:
    """A store failure of the worker's (``worker.tick``, ``worker.run``, ``worker.outcome``, …): one
    ``store.error`` line per operation in ``STORE_ERROR_LOG_S`` at most — a full disk fails every tick
    and job until it is freed — with ``count``, the failures it stands for. ``last``: a line that
    must be written (a job giving up), counting those held back before it."""
    count = _store_errors.force(operation) if last else _store_errors.due(operation)
    if count is not None:
        log.warning("store.error", operation=operation, error=failure_text(exc), count=count, **fields)


class JobContext(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Store: ...
    @property
    def log(self) -> Any: ...


async def commit_outcome(ctx: JobContext, fn: Callable[[RuntimeTx], T], key: str) -> T:
    """``ctx.store.flow_write(fn)``, tried again while the store fails (a full disk, an I/O error),
    for up to a lease's length (``storage.leaseSeconds``, at most ``SETTLE_FOR_MAX_S``).

    The job holds what cannot be had again for free: a model's reply, a message a chat API has taken.
    Given up at once, the job's lease ran out and its next attempt called the model again (a run's
    second failure ended it ``lost``) or sent the message twice. Its lease is renewed meanwhile (the
    worker's ``_with_lease``: nothing else takes the job), and a cancellation (shutdown, a lease that
    ran out) ends the tries. Past a lease's length the failure is raised, as it was at once before: an
    outcome the disk has no room for while smaller writes fit would otherwise fail, every few seconds,
    the group commit of the requests beside it. A failed commit wrote nothing
    (``hookgate.store.sqlite.writer``), so ``fn`` runs whole again. Each failure is a ``store.error``
    line (``worker.outcome``, at most one in 10 s, with ``count``; the one that gives up always)."""
    deadline = time.monotonic() + min(ctx.settings.storage.lease_seconds, SETTLE_FOR_MAX_S)
    tries = 0
    while True:
        try:
            return await ctx.store.flow_write(fn)
        except StoreUnavailable as exc:
            wait = SETTLE_WAITS_S[min(tries, len(SETTLE_WAITS_S) - 1)]
            last = time.monotonic() + wait > deadline
            log_store_error(ctx.log, "worker.outcome", exc, last=last, key=key, retry=not last)
            if last:
                raise
            tries += 1
            await asyncio.sleep(wait)
