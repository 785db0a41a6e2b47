"""The backend-neutral ``Store`` protocol and the frozen records it speaks in (operations.md §4).

The protocol is written in domain terms (queue a system event, enqueue a hook run, list runs); each
backend keeps its SQL in ``.sql`` files of its own. Failures:

    HookgateError
     ├── StoreUnavailable     a write or read could not be committed/answered; nothing was committed
     └── StoreOpenError       the store refuses to open (database in use, schema newer than the code)

Every time is integer epoch milliseconds. Listing methods return newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import msgspec

from hookgate.errors import HookgateError

if TYPE_CHECKING:
    from hookgate.runtime.ports import RuntimeTx

T = TypeVar("T")

StoreRole = Literal["serve", "cli", "read"]
RunKind = Literal["hook", "task", "heartbeat"]
RUN_STATUSES = ("queued", "running", "ok", "error", "timed_out", "skipped", "lost", "cancelled")
EVENT_STATUSES = ("pending", "consumed", "dropped")


class StoreOpenError(HookgateError):
    """The store cannot be opened: the database is in use by another ``serve`` process, its schema is
    newer than this hookgate, or the file cannot be opened. The CLI reports the message and exits 2."""

    code = "store_open_failed"


# --- inputs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to enqueue (status ``queued``, attempt 1). ``session_id`` defaults to a fresh transcript id.
    ``run_id`` ``None``: ``enqueue_hook_run`` makes it in the transaction that commits the run."""

    run_id: str | None
    kind: RunKind
    agent_id: str
    session_key: str
    name: str
    inputs: dict[str, Any]
    created_at: int
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """A reply in the delivery log (model.md §10.4); ``attempt_outcome`` records a first attempt."""

    delivery_id: str
    run_id: str
    agent_id: str
    channel: str
    target: str
    text: str
    status: Literal["pending", "delivered", "dead"]
    attempt_outcome: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryJob:
    """A delivery as the delivery job reads it: the row plus what it needs of its run."""

    delivery_id: str
    run_id: str
    agent_id: str
    channel: str
    target: str
    text: str
    status: str
    attempts: int
    parts_sent: int
    created_at: int
    leased_by: str | None
    run_kind: str | None  # hook | task | heartbeat (None: the run was swept)
    run_name: str | None
    session_key: str | None
    run_inputs: dict[str, Any]


class IdempotencyClaim(msgspec.Struct, frozen=True):
    """A durable hook idempotency record to write with a run (hooks.md §5.4)."""

    record_key: str
    expires_at: int


# --- results ---------------------------------------------------------------------------------------
# Built on every request: frozen msgspec Structs (a frozen dataclass sets each field through
# ``object.__setattr__``, ten times slower). ``NewRun`` above stays a dataclass (its ``inputs`` are
# left out of its hash), and so do the records below: the CLI prints them with ``dataclasses.asdict``.


class WakeResult(msgspec.Struct, frozen=True):
    """Outcome of appending a system event: ``dropped`` counts pending events pushed out of the queue."""

    outcome: Literal["queued", "coalesced", "empty"]
    dropped: int = 0


class EnqueueResult(msgspec.Struct, frozen=True):
    """``replayed`` is true when a live idempotency record answered with its original run id."""

    run_id: str
    replayed: bool


# --- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRecord:
    key: str
    agent_id: str
    session_id: str
    spawned_by: str | None
    last_channel: str | None
    last_to: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    seq: int
    session_key: str
    agent_id: str
    text: str
    created_at: int
    status: str
    failed_turns: int
    consumed_by_run_id: str | None


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    kind: str
    agent_id: str
    session_key: str
    session_id: str
    name: str
    inputs: dict[str, Any] = field(hash=False)
    status: str
    attempt: int
    created_at: int
    started_at: int | None
    ended_at: int | None
    reply: str | None
    error: str | None
    leased_by: str | None
    lease_until: int | None
    updated_at: int


@dataclass(frozen=True, slots=True)
class HeartbeatSchedule:
    agent_id: str
    due_at: int | None  # None: no scheduled turn (``every`` 0 and no wake request)
    leased_by: str | None
    lease_until: int | None
    last_ended_at: int | None
    updated_at: int


# --- protocol --------------------------------------------------------------------------------------


class Store(Protocol):
    """Durable state of one hookgate deployment. Every write method is one transaction."""

    async def open(self, role: StoreRole = "serve") -> None:
        """Open (and migrate) the store. ``serve`` takes the single-serve lock; ``cli`` does not; ``read``
        (a command that only reads) neither creates, migrates nor writes: the store must exist and
        hold this code's schema (``StoreOpenError`` otherwise)."""

    async def close(self) -> None:
        """Finish every submitted write, close connections and release the lock."""

    async def ping(self, timeout: float = 1.0) -> bool:
        """True when a round trip to the store succeeded within ``timeout`` and it accepts writes."""

    @property
    def writes(self) -> int:
        """Committed write transactions that changed data since the store opened: how busy it has been."""

    async def release_memory(self) -> None:
        """Give back what the store caches in memory beyond its idle footprint (after a burst)."""

    async def queue_system_event(
        self, *, session_key: str, agent_id: str, text: str, now_ms: int, wake_reason: str | None
    ) -> WakeResult:
        """Append already sanitised, trimmed ``text`` to a main session's queue (model.md §4.1) and,
        with ``wake_reason``, record a wake request (model.md §6.2) — all in one transaction."""

    async def enqueue_hook_run(self, run: NewRun, idempotency: IdempotencyClaim | None) -> EnqueueResult:
        """Commit a queued run with its idempotency record, or replay a live record (hooks.md §5.4)."""

    async def find_hook_idempotency(self, record_key: str, now_ms: int) -> str | None:
        """The run id of a live hook idempotency record, without writing anything."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def flow_write(self, fn: Callable[[RuntimeTx], T]) -> T:
        """Run ``fn`` in one write transaction (TaskFlow actions); returns after the commit."""

    async def flow_read(self, fn: Callable[[RuntimeTx], T], *, small: bool = False) -> T:
        """Run ``fn`` on a consistent read snapshot; ``small``: a point read the backend may run inline."""

    async def list_flow_views(self, owner_key: str) -> msgspec.Raw:
        """``list_flows`` (webhooks.md §4.3): every flow of the owner as a JSON array of FlowViews,
        newest first (``FlowTx.list_flow_views``). A list has no bound: the backend chooses where so
        large a read runs."""

    async def list_runs(
        self,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        statuses: Sequence[str] = (),
        since_ms: int | None = None,
        limit: int = 50,
    ) -> list[RunRecord]:
        """Runs newest first (``created_at``, then run id)."""

    async def list_events(
        self, *, agent_id: str | None = None, status: str = "pending", limit: int = 50
    ) -> list[EventRecord]:
        """System events newest first (highest ``seq`` first); ``status="all"`` lists every status."""

    async def get_session(self, key: str) -> SessionRecord | None: ...

    async def get_heartbeat_schedule(self, agent_id: str) -> HeartbeatSchedule | None: ...

    async def pending_heartbeat_requests(self, agent_id: str) -> int:
        """How many wake requests of the agent are not consumed yet."""

    async def sweep(self, now_ms: int) -> int:
        """Delete expired idempotency records; returns how many were deleted."""

    async def sweep_history(self, runs_before_ms: int, events_before_ms: int) -> tuple[int, int]:
        """Delete terminal runs ended before ``runs_before_ms`` (with their isolated transcripts) and
        consumed or dropped events (and consumed wake requests) older than ``events_before_ms``;
        returns (runs, events) deleted (operations.md §4.1)."""
