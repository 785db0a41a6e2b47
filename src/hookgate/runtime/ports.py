"""What the runtime worker needs from a store, in domain terms (implemented by ``store/*``).

A ``RuntimeTx`` is one open transaction, like ``flows.ports.FlowTx`` (which it extends: completing
an executed task's run updates the task in the same transaction). ``Store.flow_write`` runs it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from hookgate.flows.ports import FlowTx
from hookgate.store.base import DeliveryJob, DeliveryRecord, NewRun


class RuntimeTx(FlowTx, Protocol):
    def claim_runs(self, instance: str, now_ms: int, lease_until: int, limit: int,
                   skip: Collection[str] = ()) -> list[str]:
        """Lease due runs, oldest first: queued ones keep their attempt, expired running ones get the
        next. ``skip``: runs this process still executes (their lease expired under it)."""

    def renew_run_lease(self, run_id: str, instance: str, lease_until: int) -> bool: ...

    def release_run(self, run_id: str, instance: str, now_ms: int) -> None:
        """Back to queued without consuming an attempt (orderly shutdown)."""

    def finish_run(self, run_id: str, status: str, reply: str | None, error: str | None, now_ms: int) -> None: ...

    def append_transcript(self, session_key: str, session_id: str, role: str, text: str, run_id: str | None,
                          now_ms: int) -> None: ...

    def transcript_tail(self, session_key: str, limit: int) -> list[tuple[str, str]]:
        """The last ``limit`` messages of the session's current transcript, oldest first."""

    def session_id_of(self, session_key: str, agent_id: str, now_ms: int) -> str:
        """The session's current transcript id (the session is created on first use)."""

    def schedule_heartbeat(self, agent_id: str, every_ms: int, now_ms: int) -> None:
        """Set the agent's next scheduled turn (model.md §6.1): the end of its last turn plus
        ``every_ms`` (no turn yet: ``now_ms`` plus it; ``0``: none). A due time pulled earlier by
        pending wake requests is kept."""

    def rewind_deadlines(self, now_ms: int, step_ms: int, lease_ms: int, retry_ms: int,
                         every_ms: Mapping[str, int]) -> int:
        """The wall clock stepped back by ``step_ms`` (``0``: at a start, by how much unknown): every
        lease, delivery retry and scheduled turn still ahead of ``now_ms`` moves that much earlier, and
        none stays further ahead than a lease (``lease_ms``), the longest retry wait (``retry_ms``) or
        the agent's interval (``every_ms``; a second while a wake waits). Returns the rows changed."""

    def renew_heartbeat_lease(self, agent_id: str, instance: str, lease_until: int) -> bool: ...

    def release_heartbeat(self, agent_id: str, instance: str) -> None:
        """An orderly shutdown gives the turn back: the schedule row is free at once."""

    def claim_heartbeats(self, instance: str, now_ms: int, lease_until: int) -> list[str]: ...

    def last_pending_heartbeat_request(self, agent_id: str) -> int: ...
    def finish_heartbeat(self, agent_id: str, next_due: int | None, answered_upto: int, now_ms: int) -> None: ...

    def pending_events(self, session_key: str) -> list[tuple[int, int, str]]:
        """(seq, createdAt, text) of the session's pending events in sequence order."""

    def consume_events(self, seqs: Sequence[int], run_id: str, now_ms: int) -> None: ...

    def fail_events(self, seqs: Sequence[int], max_failed_turns: int, now_ms: int) -> int:
        """Count a failed turn on each event; returns how many reached ``max_failed_turns`` (dropped)."""

    def queued_runs(self) -> int: ...

    def due_heartbeats(self, now_ms: int) -> int:
        """Agents whose heartbeat is due and not leased (a turn waiting for a worker)."""

    def record_delivery(self, delivery: DeliveryRecord, now_ms: int) -> None: ...

    def run_deliveries(self, run_id: str) -> list[dict[str, Any]]:
        """The run's deliveries with their attempts, for ``runs show``."""

    # delivery jobs (model.md §10.4, operations.md §4.4)
    def claim_deliveries(self, instance: str, now_ms: int, lease_until: int, limit: int,
                         skip: Collection[str] = (), per_channel: int | None = None,
                         busy: Mapping[str, int] | None = None) -> list[tuple[str, str]]:
        """Lease due deliveries, as (delivery id, channel): only the oldest pending one of each
        (channel, target), none of a target with another in flight, and at most ``per_channel`` of
        one channel less what is ``busy`` there (this worker's deliveries in flight by channel);
        ``skip`` as for runs."""

    def renew_delivery_lease(self, delivery_id: str, instance: str, lease_until: int) -> bool: ...

    def release_delivery(self, delivery_id: str, instance: str) -> None: ...

    def get_delivery(self, delivery_id: str) -> DeliveryJob | None: ...

    def delivery_part_sent(self, delivery_id: str, parts_sent: int, message_id: str | None, now_ms: int) -> None:
        """Progress of a split text: the first ``parts_sent`` parts are out (never sent again)."""

    def finish_delivery_attempt(self, delivery_id: str, status: str, next_attempt_at: int | None,
                                outcome: str, http_status: int | None, error: str | None, now_ms: int) -> None: ...

    def requeue_delivery(self, delivery_id: str, now_ms: int) -> bool: ...

    def delivery_status(self, delivery_id: str) -> str | None: ...

    def dead_deliveries(self, channel: str | None, since_ms: int | None) -> list[str]: ...

    def due_deliveries(self, now_ms: int) -> int:
        """Pending deliveries due by ``now_ms`` and not leased."""

    def next_job_due(self, now_ms: int) -> int | None:
        """The next delivery retry or heartbeat turn due after ``now_ms`` (``None``: none)."""

    def delete_finished_deliveries(self, updated_before_ms: int) -> int: ...

    def run_transcript(self, run_id: str) -> list[tuple[str, str]]:
        """(role, text) of the messages a run appended: its prompt and reply."""

    def insert_finished_run(self, run: NewRun, session_id: str, status: str, reply: str | None,
                            error: str | None, now_ms: int) -> None:
        """Record a run that already ended (heartbeat turns)."""

    def last_route(self, main_session_key: str) -> tuple[str | None, str | None]: ...

    def set_last_route(self, main_session_key: str, agent_id: str, channel: str, to: str, now_ms: int) -> None: ...
