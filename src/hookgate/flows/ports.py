"""What the flows service needs from a store, in domain terms (implemented by ``store/*``).

A ``FlowTx`` is one open store transaction: every method is synchronous and sees the writes made
before it in the same transaction. ``Store.flow_write(fn)`` runs ``fn(tx)`` atomically (one commit,
fsynced before the caller resumes); ``Store.flow_read(fn)`` runs it on a read snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from hookgate.flows.model import Flow, Task
from hookgate.store.base import NewRun


class StoredResponse(msgspec.Struct, frozen=True):
    """A Surface A response kept for ``Idempotency-Key`` replay (webhooks.md §3.5)."""

    body_sha256: str
    status: int
    body: bytes


class FlowTx(Protocol):
    # flows -------------------------------------------------------------------------------------
    def new_flow_id(self) -> str:
        """A UUID v4 for the flow this transaction inserts next (``insert_flow``); the store decides
        how it is made (SQLite: from the new row's sequence number, store/sqlite/seqids.py)."""

    def get_flow(self, flow_id: str, owner_key: str) -> Flow | None: ...

    def list_flow_views(self, owner_key: str) -> msgspec.Raw:
        """Every flow of the owner as a JSON array of FlowViews (``views.FLOW_VIEW_LAYOUT``), newest
        first (``views.newest_first``): rendered by the store, since a list has no bound (§4.3)."""

    def latest_flow(self, owner_key: str, *, active_only: bool) -> Flow | None: ...

    def insert_flow(self, flow: Flow) -> int:
        """Store a new flow; returns its creation sequence number."""

    def update_flow_if_revision(self, flow: Flow, expected_revision: int) -> bool:
        """Write ``flow`` only while the stored revision is still ``expected_revision``."""

    # tasks -------------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> Task | None: ...

    def list_tasks(self, flow_id: str) -> list[Task]:
        """Newest first: ``createdAt`` descending, ties → the later-created first."""

    def task_counts(self, flow_id: str) -> list[tuple[str, str, int]]:
        """The flow's tasks counted by ``(status, runtime)``: what ``get_task_summary`` needs."""

    def tasks_with_run_id(self, flow_id: str, run_id: str) -> list[Task]:
        """The flow's tasks with this ``runId`` (in no set order): where a ``run_task`` retry's task is."""

    def insert_task(self, task: Task) -> Task: ...

    def update_task(self, task: Task) -> None: ...

    # sessions and notifications ---------------------------------------------------------------
    def session_parent(self, key: str) -> tuple[bool, str | None]:
        """(known, spawnedBy) of a session key."""

    def record_child_session(self, key: str, parent: str, agent_id: str, now_ms: int) -> None: ...

    def queue_system_event(self, session_key: str, agent_id: str, text: str, now_ms: int,
                           wake_reason: str | None) -> str:
        """Append a (sanitised) event to a main session; returns ``queued``/``coalesced``."""

    # retention and operators (model.md §2.5, operations.md §1.4) --------------------------------
    def delete_expired_tasks(self, now_ms: int) -> int:
        """Delete terminal tasks whose ``cleanupAfter`` has passed."""

    def delete_ended_flows(self, ended_before_ms: int) -> int:
        """Delete terminal flows that ended before the time and have no remaining task."""

    def admin_list_flows(self, owner_key: str | None, statuses: Sequence[str], limit: int) -> list[Flow]:
        """Any owner's flows (operators only), newest first."""

    def admin_get_flow(self, flow_id: str) -> Flow | None: ...

    def new_run_id(self) -> str:
        """A UUID v4 for the run this transaction enqueues next (``enqueue_run``); made like ``new_flow_id``."""

    def enqueue_run(self, run: NewRun) -> None:
        """Queue a run (kind ``task`` for executed tasks) in this transaction; its session is created on first use."""

    # idempotency ---------------------------------------------------------------------------------
    def get_webhook_response(self, route_id: str, key: str, now_ms: int) -> StoredResponse | None: ...

    def put_webhook_response(self, route_id: str, key: str, response: StoredResponse, now_ms: int,
                             expires_at: int) -> None: ...
