"""Task notifications (model.md §2.3): where they go, what they say, and which a transition emits.

Notifications are system events on the task's *notification session*; queuing them is the caller's
job. ``notifications_for(old, new)`` is the single decision: given a task before and after a
transition (``old`` is ``None`` at creation) it returns the notifications to queue and the task's
resulting ``deliveryStatus`` and ``notifiedStates``; ``with_notifications`` applies those to the task.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from hookgate.config.names import main_session_key
from hookgate.flows.model import (
    DELIVERY_NOT_APPLICABLE,
    DELIVERY_SESSION_QUEUED,
    NOTIFY_SILENT,
    NOTIFY_STATE_CHANGES,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TASK_TERMINAL,
    Task,
    agent_id_from_session_key,
    collapse_whitespace,
)

NotificationKind = Literal["accepted", "started", "update", "terminal"]

TITLE_MAX_CHARS: Final = 120
DETAIL_MAX_CHARS: Final = 500
RUN_ID_PREFIX_CHARS: Final = 8

TERMINAL_VERBS: Final[dict[str, str]] = {
    "succeeded": "done",
    "failed": "failed",
    "timed_out": "timed out",
    "cancelled": "cancelled",
    "lost": "lost",
}


class Notification(msgspec.Struct, frozen=True):
    """One system event to queue on the task's notification session."""

    kind: NotificationKind
    text: str
    task_id: str

    @property
    def wakes(self) -> bool:
        """A terminal notification requests an immediate heartbeat for the agent."""
        return self.kind == "terminal"

    @property
    def heartbeat_reason(self) -> str | None:
        return f"task:{self.task_id}" if self.kind == "terminal" else None


class NotificationPlan(msgspec.Struct, frozen=True):
    notifications: tuple[Notification, ...]
    delivery_status: str
    notified_states: tuple[str, ...]


def notification_session(owner_key: str, default_agent_id: str) -> tuple[str, str]:
    """(session key, agent id) receiving a task's notifications for a flow owned by ``owner_key``.

    The owner key itself when it is a main session; else the main session of the agent named in
    it (``agent:<id>:…``); else the default agent's main session.
    """
    key = owner_key.strip().lower()
    agent = agent_id_from_session_key(key)
    if agent is None:
        agent = default_agent_id
    return main_session_key(agent), agent


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters plus ``…`` when longer."""
    return text if len(text) <= limit else text[:limit] + "…"


def task_title(task: Task) -> str:
    """The label, else the task text; whitespace collapsed; cut to 120 characters + ``…``."""
    return cut(collapse_whitespace(task.label or task.task), TITLE_MAX_CHARS)


def _verb_and_detail(task: Task, kind: NotificationKind) -> tuple[str, str | None]:
    if kind == "accepted":
        return "accepted", None
    if kind == "started":
        return "started", None
    if kind == "update":
        return "update", task.progress_summary
    verb = TERMINAL_VERBS.get(task.status, task.status)
    if task.status == SUCCEEDED:
        return verb, task.terminal_summary
    return verb, task.error or task.terminal_summary


def notification_text(task: Task, kind: NotificationKind) -> str:
    """``Background task <verb>: <title><run>.`` plus `` <detail>`` when there is one.

    For ``kind="terminal"`` the verb comes from the task's (terminal) status.
    """
    verb, detail = _verb_and_detail(task, kind)
    run = f" (run {task.run_id[:RUN_ID_PREFIX_CHARS]})" if task.run_id else ""
    text = f"Background task {verb}: {task_title(task)}{run}."
    if detail:
        text += " " + cut(detail, DETAIL_MAX_CHARS)
    return text


def notifications_for(old: Task | None, new: Task, policy: str | None = None) -> NotificationPlan:
    """The notifications a transition ``old`` → ``new`` emits under ``policy`` (default: the task's).

    ``state_changes``: ``accepted`` when created queued; ``started`` when it becomes running (once);
    ``update`` when the progress summary changes to a new non-empty value while it stays running;
    the terminal one. ``done_only``: only the terminal one. ``silent``: none. Reaching a terminal
    status sets ``deliveryStatus`` to ``session_queued`` (``not_applicable`` when silent).
    """
    policy = policy or new.notify_policy
    sent = list(new.notified_states)
    out: list[Notification] = []
    delivery = new.delivery_status
    old_status = old.status if old is not None else None

    def emit(kind: NotificationKind) -> None:
        out.append(Notification(kind=kind, text=notification_text(new, kind), task_id=new.task_id))
        if kind not in sent:
            sent.append(kind)

    if policy == NOTIFY_STATE_CHANGES:
        if old is None and new.status == QUEUED and "accepted" not in sent:
            emit("accepted")
        if new.status == RUNNING and old_status != RUNNING and "started" not in sent:
            emit("started")
        if (
            old is not None
            and old.status == RUNNING
            and new.status == RUNNING
            and new.progress_summary is not None
            and new.progress_summary != old.progress_summary
        ):
            emit("update")
    if new.status in TASK_TERMINAL and old_status not in TASK_TERMINAL:
        if policy == NOTIFY_SILENT:
            delivery = DELIVERY_NOT_APPLICABLE
        else:
            emit("terminal")
            delivery = DELIVERY_SESSION_QUEUED
    return NotificationPlan(tuple(out), delivery, tuple(sent))


def with_notifications(old: Task | None, new: Task) -> tuple[Task, tuple[Notification, ...]]:
    """``new`` with the plan's ``deliveryStatus``/``notifiedStates`` applied, and the notifications."""
    plan = notifications_for(old, new)
    task = msgspec.structs.replace(
        new, delivery_status=plan.delivery_status, notified_states=plan.notified_states
    )
    return task, plan.notifications
