"""TaskFlow and task records (model.md §1.1, §2.1): frozen values that the rules replace, never mutate.

They are frozen ``msgspec.Struct``s, built and replaced (``msgspec.structs.replace``) in C. A frozen
dataclass with these ~20 fields cost 5 µs to build and 10 µs to replace on a slow VM (one
``object.__setattr__`` per field), a struct 0.4 µs each: every Surface A request builds or replaces
at least one, and ``list_flows`` builds one per stored flow.

Optional strings are ``None`` when absent and are never stored empty. ``state_json``/``wait_json``
are ``UNSET`` when absent and ``None`` when they hold JSON ``null`` — two different states.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from hookgate.jstext import JS_WHITESPACE
from hookgate.webhooks.schema import UNSET

# Flow statuses (model.md §1.2)
QUEUED: Final = "queued"
RUNNING: Final = "running"
WAITING: Final = "waiting"
BLOCKED: Final = "blocked"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
LOST: Final = "lost"
# Task-only status
TIMED_OUT: Final = "timed_out"

FLOW_STATUSES: Final = (QUEUED, RUNNING, WAITING, BLOCKED, SUCCEEDED, FAILED, CANCELLED, LOST)
FLOW_TERMINAL: Final = frozenset({SUCCEEDED, FAILED, CANCELLED, LOST})

TASK_STATUSES: Final = (QUEUED, RUNNING, SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, LOST)
TASK_ACTIVE: Final = frozenset({QUEUED, RUNNING})
TASK_TERMINAL: Final = frozenset({SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, LOST})
TASK_FAILURES: Final = frozenset({FAILED, TIMED_OUT, LOST})

TASK_RUNTIMES: Final = ("subagent", "acp", "cli", "cron")

MANAGED: Final = "managed"
TASK_MIRRORED: Final = "task_mirrored"

NOTIFY_DONE_ONLY: Final = "done_only"
NOTIFY_STATE_CHANGES: Final = "state_changes"
NOTIFY_SILENT: Final = "silent"

DELIVERY_PENDING: Final = "pending"
DELIVERY_SESSION_QUEUED: Final = "session_queued"
DELIVERY_NOT_APPLICABLE: Final = "not_applicable"
DELIVERY_DELIVERED: Final = "delivered"
DELIVERY_STATUSES: Final = (
    DELIVERY_PENDING,
    DELIVERY_SESSION_QUEUED,
    DELIVERY_NOT_APPLICABLE,
    DELIVERY_DELIVERED,
    "failed",
    "parent_missing",
)

CANCELLED_BY_OPERATOR: Final = "Cancelled by operator."


class Flow(msgspec.Struct, frozen=True):
    """A TaskFlow record (model.md §1.1)."""

    flow_id: str
    owner_key: str
    goal: str
    created_at: int
    updated_at: int
    seq: int = 0  # creation sequence (assigned by the store): tie-break for "newest"
    sync_mode: str = MANAGED
    controller_id: str | None = None
    revision: int = 0
    status: str = QUEUED
    notify_policy: str = NOTIFY_DONE_ONLY
    current_step: str | None = None
    blocked_task_id: str | None = None
    blocked_summary: str | None = None
    state_json: Any = UNSET
    wait_json: Any = UNSET
    cancel_requested_at: int | None = None
    ended_at: int | None = None
    created_by_route: str | None = None  # logs only


class Task(msgspec.Struct, frozen=True):
    """A task record (model.md §2.1)."""

    task_id: str
    runtime: str
    owner_key: str
    requester_session_key: str
    task: str
    created_at: int
    seq: int = 0  # creation sequence (assigned by the store): tie-break for "newest"
    scope_kind: str = "session"
    source_id: str | None = None
    parent_task_id: str | None = None
    label: str | None = None
    run_id: str | None = None
    child_session_key: str | None = None
    parent_flow_id: str | None = None
    agent_id: str | None = None
    status: str = QUEUED
    delivery_status: str = DELIVERY_PENDING
    notify_policy: str = NOTIFY_DONE_ONLY
    progress_summary: str | None = None
    terminal_summary: str | None = None
    error: str | None = None
    terminal_outcome: str | None = None
    started_at: int | None = None
    last_event_at: int | None = None
    ended_at: int | None = None
    cleanup_after: int | None = None
    executed: bool = False  # hookgate runs it (webhooks.md §5.4)
    run_ref: str | None = None  # the hookgate run executing it
    notified_states: tuple[str, ...] = ()  # notification kinds already queued
    requester_agent_id: str | None = None
    task_kind: str | None = None
    metadata: Any = None


def is_terminal(status: str) -> bool:
    """Terminal for flows and tasks alike: succeeded, failed, timed_out, cancelled, lost."""
    return status in FLOW_TERMINAL or status == TIMED_OUT


def is_active(task: Task) -> bool:
    return task.status in TASK_ACTIVE


def collapse_whitespace(text: str) -> str:
    """Whitespace runs collapsed to one space, trimmed (JavaScript ``\\s`` semantics)."""
    out: list[str] = []
    pending_space = False
    for char in text:
        if char in JS_WHITESPACE:
            pending_space = bool(out)
            continue
        if pending_space:
            out.append(" ")
            pending_space = False
        out.append(char)
    return "".join(out)


def clean_summary(text: str | None) -> str | None:
    """A stored summary/error: whitespace collapsed and trimmed; empty → absent (``None``)."""
    if text is None:
        return None
    cleaned = collapse_whitespace(text)
    return cleaned or None


def agent_id_from_session_key(key: str | None) -> str | None:
    """``agent:<id>:…`` → ``<id>`` (lower-cased); anything else → ``None``."""
    if not key:
        return None
    parts = key.strip().split(":", 2)
    if len(parts) == 3 and parts[0].lower() == "agent" and parts[1].strip() and parts[2]:
        return parts[1].strip().lower()
    return None
