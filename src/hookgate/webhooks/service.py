"""The TaskFlow action service: one store transaction per action (webhooks.md §3–§5, README §9).

Each action loads the owner-scoped records through a ``FlowTx``, asks ``flows.decisions`` what to do,
writes what the decision says, queues the task notifications, and — for mutating actions with an
``Idempotency-Key`` — stores the response, all in the same transaction. Reads run on a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from hookgate.clock import Clock, new_id
from hookgate.config.names import main_session_key
from hookgate.config.settings import RouteSettings, Settings
from hookgate.flows import decisions, results
from hookgate.flows.model import Task, agent_id_from_session_key
from hookgate.flows.notifications import Notification, notification_session
from hookgate.flows.ports import FlowTx, StoredResponse
from hookgate.flows.rules import (
    DAY_MS,
    LINEAGE_MAX_STEPS,
    Retention,
    TaskChange,
    child_session_verdict,
    may_settle,
    normalise_session_key,
)
from hookgate.runtime.events import sanitize_system_text
from hookgate.store.base import NewRun, Store
from hookgate.webhooks import schema as s

_encode = msgspec.json.Encoder().encode
HOUR_MS = 3_600_000


class ActionResult(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    code: str  # ok, cancel_pending or the error code (metrics, logs)
    replayed: bool = False
    flow_id: str | None = None


class FlowService:
    """Runs validated actions for a route."""

    def __init__(self, store: Store, clock: Clock, settings: Callable[[], Settings]) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        # The embedded worker plugs in here: new task runs wake it, cancelled ones are aborted.
        self.on_enqueue: Callable[[], None] = lambda: None
        self.on_abort: Callable[[str], None] = lambda run_id: None
        self._effects: list[tuple[str, str]] = []

    async def execute(self, route: RouteSettings, action: s.Action, name: str, *, idempotency_key: str | None,
                      body_sha256: str) -> ActionResult:
        now = self.clock.now_ms()
        if name == "list_flows":  # every flow of the owner, no paging (§4.3): the store renders it
            return _result(route, results.flows_result(await self.store.list_flow_views(route.session_key)))
        if name not in s.MUTATING_ACTIONS:
            outcome = await self.store.flow_read(lambda tx: _READS[name](tx, route, action), small=True)
            return _result(route, outcome)
        ttl_ms = int(self.settings().webhooks.idempotency_ttl_hours * HOUR_MS)

        effects: list[tuple[str, str]] = []

        def run(tx: FlowTx) -> ActionResult:
            # Transactions run one at a time, synchronously: the side list belongs to this one.
            effects.clear()
            self._effects = effects
            if idempotency_key is not None:
                stored = tx.get_webhook_response(route.id, idempotency_key, now)
                if stored is not None:
                    if stored.body_sha256 == body_sha256:
                        return ActionResult(stored.status, stored.body, "replay", replayed=True)
                    return _result(route, results.idempotency_key_reused())
            outcome = self._mutate(tx, route, action, now)
            answer = _result(route, outcome)
            if idempotency_key is not None and answer.status < 500:
                tx.put_webhook_response(route.id, idempotency_key,
                                        StoredResponse(body_sha256, answer.status, answer.body), now, now + ttl_ms)
            return answer

        answer = await self.store.flow_write(run)
        for kind, run_id in effects:  # after the commit: the worker sees committed rows only
            if kind == "enqueue":
                self.on_enqueue()
            else:
                self.on_abort(run_id)
        return answer

    async def sweep(self, now: int) -> tuple[int, int]:
        """Retention (model.md §2.5): expired terminal tasks, then old terminal flows left without tasks."""
        retention = self.settings().storage.retention

        def run(tx: FlowTx) -> tuple[int, int]:
            tasks = tx.delete_expired_tasks(now)
            flows = 0
            if retention.flow_days > 0:
                flows = tx.delete_ended_flows(now - int(retention.flow_days * DAY_MS))
            return tasks, flows

        return await self.store.flow_write(run)

    # --- mutations --------------------------------------------------------------------------------

    def _mutate(self, tx: FlowTx, route: RouteSettings, action: s.Action, now: int) -> results.Outcome:
        owner = route.session_key
        if isinstance(action, s.CreateFlow):
            decision = decisions.decide_create_flow(
                action, flow_id=tx.new_flow_id(), owner_key=owner, route_controller_id=route.controller_id, now=now,
                route_id=route.id,
            )
            assert decision.flow is not None
            tx.insert_flow(decision.flow)
            return decision.outcome
        if isinstance(action, s.SetWaiting | s.ResumeFlow | s.FinishFlow | s.FailFlow | s.RequestCancel):
            flow = tx.get_flow(action.flow_id, owner)
            decision = decisions.decide_mutation(flow, action, now)
            written = decision.flow is None or flow is None or tx.update_flow_if_revision(decision.flow, flow.revision)
            if not written:  # another writer moved the revision since the read (multi-writer backends)
                current = tx.get_flow(action.flow_id, owner)
                assert current is not None
                return results.revision_conflict(current)
            return decision.outcome
        if isinstance(action, s.CancelFlow):
            return self._cancel(tx, owner, action, now)
        if isinstance(action, s.RunTask):
            return self._run_task(tx, route, action, now)
        assert isinstance(action, s.UpdateTask)
        return self._update_task(tx, owner, action, now)

    def _retention(self) -> Retention:
        r = self.settings().storage.retention
        return Retention(task_days=r.task_days, lost_task_days=r.lost_task_days)

    def _cancel(self, tx: FlowTx, owner: str, action: s.CancelFlow, now: int) -> results.Outcome:
        flow = tx.get_flow(action.flow_id, owner)
        tasks = tx.list_tasks(flow.flow_id) if flow is not None else []
        decision = decisions.decide_cancel(flow, tasks, now, self._retention())
        for change in decision.tasks:
            self._write_task(tx, change, owner, now)
            if change.task.run_ref:
                self._effects.append(("abort", change.task.run_ref))
        if decision.flow is not None and flow is not None:
            tx.update_flow_if_revision(decision.flow, flow.revision)
        return decision.outcome

    def _run_task(self, tx: FlowTx, route: RouteSettings, action: s.RunTask, now: int) -> results.Outcome:
        owner = route.session_key
        flow = tx.get_flow(action.flow_id, owner)
        child = normalise_session_key(action.child_session_key) if action.child_session_key is not None else None
        verdict = None
        if flow is not None and child is not None:
            ancestors = _ancestors(tx, child)
            if ancestors is None and _is_configured_root(child, self.settings()):
                ancestors = []  # known before the store first records it: a root, no route's child
            verdict = child_session_verdict(child, owner, ancestors)
        # a retry reuses a task with the same runId: only those are read (not the flow's every task)
        tasks = (tx.tasks_with_run_id(flow.flow_id, action.run_id)
                 if flow is not None and action.run_id is not None else [])
        decision = decisions.decide_run_task(flow, tasks, action, task_id=new_id(), now=now,
                                             execute=route.execute, child_verdict=verdict)
        if decision.record_child_session and child is not None:
            agent = agent_id_from_session_key(child) or route.agent_id or self.settings().agents.default_agent_id
            tx.record_child_session(child, owner, agent, now)
        if decision.task is not None:
            if decision.created:
                task = decision.task.task
                if decision.enqueue_run:
                    task = self._enqueue_task_run(tx, route, task, action, now)
                tx.insert_task(task)
                self._notify(tx, decision.task.notifications, owner, now)
            else:
                tx.update_task(decision.task.task)
        return decision.outcome

    def _enqueue_task_run(self, tx: FlowTx, route: RouteSettings, task: Task, action: s.RunTask, now: int) -> Task:
        """webhooks.md §5.4: a ``task`` run in the same transaction; the task points at it.

        The run's agent is the one the request names (``agentId``, else ``childSessionKey``'s) when
        known, else the route's ``agentId`` (which defaults to the route session's agent, else the
        default agent). The task's own ``agentId`` stays as §4.13's Effect rule fills it — from the
        owner key when the request names none —, which made the route's ``agentId`` unreachable
        when the route's session key named an agent."""
        agents = self.settings().agents
        named = action.agent_id or agent_id_from_session_key(action.child_session_key)
        agent = named if named in agents.known_ids else (route.agent_id or agents.default_agent_id)
        session = task.child_session_key or f"agent:{agent}:subagent:{task.task_id}"
        known, _ = tx.session_parent(session)
        if not known:
            tx.record_child_session(session, route.session_key, agent, now)
        run_id = tx.new_run_id()
        run = NewRun(run_id=run_id, kind="task", agent_id=agent, session_key=session,
                     name=sanitize_system_text(task.label or "Task"),  # model.md §5.1: the sanitised name
                     inputs={"taskId": task.task_id, "flowId": task.parent_flow_id, "wrap": True,
                             "externalContentSource": "webhook", "deliver": False, "wakeMode": "now"},
                     created_at=now)
        tx.enqueue_run(run)
        self._effects.append(("enqueue", run_id))
        return msgspec.structs.replace(task, run_ref=run_id)

    def _update_task(self, tx: FlowTx, owner: str, action: s.UpdateTask, now: int) -> results.Outcome:
        task = tx.get_task(action.task_id)
        flow = tx.get_flow(task.parent_flow_id, owner) if task is not None and task.parent_flow_id else None
        # the tasks matter only to the settle rule: not read when it cannot fire
        flow_tasks = tx.list_tasks(flow.flow_id) if flow is not None and may_settle(flow) else []
        decision = decisions.decide_update_task(task, flow, flow_tasks, action, now, self._retention())
        if decision.task is not None:
            self._write_task(tx, decision.task, owner, now)
        if decision.flow is not None and flow is not None:
            tx.update_flow_if_revision(decision.flow, flow.revision)
        return decision.outcome

    def _write_task(self, tx: FlowTx, change: TaskChange, owner: str, now: int) -> None:
        tx.update_task(change.task)
        self._notify(tx, change.notifications, owner, now)

    def _notify(self, tx: FlowTx, notes: tuple[Notification, ...], owner: str, now: int) -> None:
        if not notes:
            return
        session, agent = notification_session(owner, self.settings().agents.default_agent_id)
        for note in notes:
            tx.queue_system_event(session, agent, note.text, now, note.heartbeat_reason)


# --- reads ----------------------------------------------------------------------------------------


def _get_flow(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    return results.flow_result(tx.get_flow(action.flow_id, route.session_key))


def _find_latest(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    return results.flow_result(tx.latest_flow(route.session_key, active_only=False))


def _resolve(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    owner = route.session_key
    by_id = tx.get_flow(action.token, owner)
    if by_id is not None:
        return results.flow_result(by_id)
    if normalise_session_key(action.token) == normalise_session_key(owner):  # §4.5: case-insensitive
        flow = tx.latest_flow(owner, active_only=True) or tx.latest_flow(owner, active_only=False)
        return results.flow_result(flow)
    return results.flow_result(None)


def _summary(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    flow = tx.get_flow(action.flow_id, route.session_key)
    return results.summary_result(tx.task_counts(flow.flow_id) if flow is not None else None)


def _get_task(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    task = tx.get_task(action.task_id)
    visible = task is not None and task.parent_flow_id is not None and (
        tx.get_flow(task.parent_flow_id, route.session_key) is not None
    )
    return results.task_result(task if visible else None)


def _list_tasks(tx: FlowTx, route: RouteSettings, action: Any) -> results.Outcome:
    flow = tx.get_flow(action.flow_id, route.session_key)
    return results.tasks_result(tx.list_tasks(flow.flow_id) if flow is not None else None)


_READS: dict[str, Callable[[FlowTx, RouteSettings, Any], results.Outcome]] = {
    "get_flow": _get_flow,
    "find_latest_flow": _find_latest,
    "resolve_flow": _resolve,
    "get_task_summary": _summary,
    "get_task": _get_task,
    "list_tasks": _list_tasks,
}

def _ancestors(tx: FlowTx, key: str) -> list[str] | None:
    """The ``spawnedBy`` chain of ``key`` (parent first), or ``None`` when the store does not know it."""
    known, parent = tx.session_parent(key)
    if not known:
        return None
    chain: list[str] = []
    while parent is not None and len(chain) < LINEAGE_MAX_STEPS:
        chain.append(parent)
        known, parent = tx.session_parent(parent)
        if not known:
            break
    return chain


def _is_configured_root(key: str, settings: Settings) -> bool:
    """``key`` (trimmed, lower-cased) is a session the config names: the main session of a configured
    agent (``agent:<id>:main``) or the session of a configured route.

    The child-session guard (webhooks.md §4.13) accepts a key "unknown to the store" as a new child of
    the route session. These sessions are recorded only when something first uses them (a wake, a
    summary, a notification, the route's first flow), so without this a route could claim another
    agent's main session — the spec's own example of a key to refuse — or another route's session,
    just by being first after a fresh start, and then run tasks in it."""
    agent = agent_id_from_session_key(key)
    if agent is not None and key == main_session_key(agent) and agent in settings.agents.known_ids:
        return True
    return any(route.session_key == key for route in settings.webhooks.routes)


def _result(route: RouteSettings, outcome: results.Outcome) -> ActionResult:
    code = outcome.code or "ok"
    flow_id = None
    flow = outcome.result.get("flow") if isinstance(outcome.result, dict) else None
    if isinstance(flow, dict):
        flow_id = flow.get("flowId")
    return ActionResult(outcome.status, _encode(results.envelope(route.id, outcome)), code, flow_id=flow_id)

