"""``FlowTx`` over a SQLite connection: flows, tasks, lineage and Surface A idempotency records."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

import msgspec

from hookgate import jsonbody
from hookgate.errors import StoreUnavailable
from hookgate.flows.model import Flow, Task
from hookgate.flows.ports import StoredResponse
from hookgate.flows.views import FLOW_VIEW_LAYOUT
from hookgate.runtime.events import prepare_event_text
from hookgate.store.base import DeliveryJob, DeliveryRecord, NewRun
from hookgate.store.sqlite.schema import Q, parse_named_queries, start_transcript
from hookgate.store.sqlite.seqids import MAX_SEQ, SeqIds
from hookgate.webhooks.schema import UNSET

if TYPE_CHECKING:
    from hookgate.store.sqlite.backend import SqliteStore

# A pending wake request pulls the agent's next turn to at most this long after a turn's end.
WAKE_DUE_MS = 1000
FQ = parse_named_queries(resources.files("hookgate.store.sqlite").joinpath("flows.sql").read_text("utf-8"))

_encode = msgspec.json.Encoder().encode
_decode = jsonbody.decoder().decode

_FLOW_FIELDS = list(Flow.__struct_fields__)
_TASK_FIELDS = list(Task.__struct_fields__)
_FLOW_JSON = {"state_json", "wait_json"}
_FLOW_JSON_COLUMNS = [i for i, n in enumerate(_FLOW_FIELDS) if n in _FLOW_JSON]  # in a selected row
_FLOW_COLUMNS = ", ".join(_FLOW_FIELDS)
_TASK_COLUMNS = ", ".join(_TASK_FIELDS)


def _flow_from_row(row: sqlite3.Row | tuple[Any, ...]) -> Flow:
    """A row selected with ``_FLOW_COLUMNS`` (the struct's field order), built positionally."""
    values = list(row)
    for i in _FLOW_JSON_COLUMNS:
        raw = values[i]
        values[i] = UNSET if raw is None else _decode(raw)
    return Flow(*values)


_FLOW_COLUMNS_NO_SEQ = [n for n in _FLOW_FIELDS if n != "seq"]
_flow_values = operator.attrgetter(*_FLOW_COLUMNS_NO_SEQ)
_FLOW_JSON_AT = [i for i, n in enumerate(_FLOW_COLUMNS_NO_SEQ) if n in _FLOW_JSON]


def _flow_params(flow: Flow) -> list[Any]:
    """The flow's columns but ``seq``, in ``_FLOW_COLUMNS_NO_SEQ`` order (positional: cheaper to bind)."""
    values = list(_flow_values(flow))
    for i in _FLOW_JSON_AT:
        value = values[i]
        values[i] = None if value is UNSET else _encode(value).decode()
    return values


_TASK_EXECUTED = _TASK_FIELDS.index("executed")
_TASK_NOTIFIED = _TASK_FIELDS.index("notified_states")
_TASK_METADATA = _TASK_FIELDS.index("metadata")


def _task_from_row(row: sqlite3.Row | tuple[Any, ...]) -> Task:
    """A row selected with ``_TASK_COLUMNS`` (the struct's field order), built positionally."""
    values = list(row)
    values[_TASK_EXECUTED] = bool(values[_TASK_EXECUTED])
    values[_TASK_NOTIFIED] = tuple(_decode(values[_TASK_NOTIFIED] or "[]"))
    metadata = values[_TASK_METADATA]
    values[_TASK_METADATA] = None if metadata is None else _decode(metadata)
    return Task(*values)


def _task_params(task: Task) -> dict[str, Any]:
    values = {name: getattr(task, name) for name in _TASK_FIELDS}
    values["executed"] = 1 if task.executed else 0
    values["notified_states"] = _encode(list(task.notified_states)).decode()
    values["metadata"] = None if task.metadata is None else _encode(task.metadata).decode()
    return values


# A flow whose id another scheme made (flows stored before migration 10, or ids given by a caller):
# seq from AUTOINCREMENT, found through the partial unique index flows_random_id.
_INSERT_FLOW = (
    f"INSERT INTO flows ({', '.join(_FLOW_COLUMNS_NO_SEQ)}) "
    f"VALUES ({', '.join('?' for _ in _FLOW_COLUMNS_NO_SEQ)})"
)
# A flow whose id ``new_flow_id`` made from its seq (seqids.py): in no index by id.
_INSERT_FLOW_BY_SEQ = (
    f"INSERT INTO flows ({', '.join(_FLOW_COLUMNS_NO_SEQ)}, seq, id_from_seq) "
    f"VALUES ({', '.join('?' for _ in _FLOW_COLUMNS_NO_SEQ)}, ?, 1)"
)
# ?N is the N-th value of _flow_params; the flow's seq and the expected revision follow them
_UPDATE_FLOW = (
    "UPDATE flows SET "
    + ", ".join(f"{n} = ?{i}" for i, n in enumerate(_FLOW_COLUMNS_NO_SEQ, 1) if n != "flow_id")
    + f" WHERE seq = ?{len(_FLOW_COLUMNS_NO_SEQ) + 1}"
    + f" AND flow_id = ?{_FLOW_COLUMNS_NO_SEQ.index('flow_id') + 1}"
    + f" AND revision = ?{len(_FLOW_COLUMNS_NO_SEQ) + 2}"
)
_INSERT_TASK = (
    f"INSERT INTO tasks ({', '.join(n for n in _TASK_FIELDS if n != 'seq')}) "
    f"VALUES ({', '.join(':' + n for n in _TASK_FIELDS if n != 'seq')})"
)
_UPDATE_TASK = (
    f"UPDATE tasks SET {', '.join(f'{n} = :{n}' for n in _TASK_FIELDS if n not in ('seq', 'task_id'))} "
    "WHERE task_id = :task_id"
)
_SELECT_FLOW = f"SELECT {_FLOW_COLUMNS} FROM flows"
_SELECT_BY_SEQ_OWNED = f"{_SELECT_FLOW} {FQ['where_flow_seq_owned']}"
_SELECT_BY_SEQ = f"{_SELECT_FLOW} {FQ['where_flow_seq']}"
_SELECT_RANDOM_OWNED = f"{_SELECT_FLOW} {FQ['where_flow_random_owned']}"
_SELECT_RANDOM = f"{_SELECT_FLOW} {FQ['where_flow_random']}"


def _flow_view_sql() -> str:
    """A SQL expression of a ``flows`` row: its FlowView as JSON text, by ``FLOW_VIEW_LAYOUT``.

    For a row hookgate wrote it is ``flow_view``'s bytes: ``json_quote`` escapes text as msgspec does,
    and a JSON column, which msgspec wrote, is embedded by ``json()`` as written. A row written
    otherwise (by hand, another tool) still gives valid JSON, not always ``flow_view``'s: an integer
    column holding text or a real is quoted by ``json_quote`` (a real with SQLite's 15 digits), and a
    JSON column that is no JSON becomes a string; JSON written with other escapes or number
    spellings is kept as written. (A BLOB, which JSON cannot hold, fails the statement.)"""
    parts = []
    for i, (key, column, rule) in enumerate(FLOW_VIEW_LAYOUT):
        head = ("{" if i == 0 else ",") + msgspec.json.encode(key).decode() + ":"
        number = f"CASE typeof({column}) WHEN 'integer' THEN {column} ELSE json_quote({column}) END"
        value = {"str": f"json_quote({column})", "str*": f"json_quote({column})", "int": number,
                 "int?": number,
                 "json?": f"CASE WHEN json_valid({column}) THEN json({column}) ELSE json_quote({column}) END"}[rule]
        present = {"str*": f"{column} != ''", "int?": f"{column} IS NOT NULL",
                   "json?": f"{column} IS NOT NULL"}.get(rule)
        if present is None:
            assert rule in ("str", "int"), rule  # a NOT NULL column: always there
            parts.append(f"'{head}' || {value}")
        else:
            assert i > 0, "the first key opens the object: it must always be there"
            parts.append(f"CASE WHEN {present} THEN '{head}' || {value} ELSE '' END")
    return " || ".join(parts) + " || '}'"


# The subquery's order (an index scan) is the order group_concat sees the rows in.
_LIST_FLOW_VIEWS = (
    f"SELECT '[' || coalesce(group_concat(view, ','), '') || ']' "
    f"FROM (SELECT {_flow_view_sql()} AS view FROM flows {FQ['where_owner_newest']})"
)
_SELECT_TASK = f"SELECT {_TASK_COLUMNS} FROM tasks"


class SqliteFlowTx:
    """One transaction's view; created per ``flow_write``/``flow_read`` call."""

    def __init__(self, conn: sqlite3.Connection, store: SqliteStore, events: list[tuple[str, int, str]]) -> None:
        self._conn = conn
        self._store = store
        self._events = events  # (outcome, dropped, session) of queued notifications, counted after commit
        self._allocated: tuple[int, str] | None = None  # (seq, flow_id) of new_flow_id
        self._allocated_run: tuple[int, str] | None = None  # (seq, run_id) of new_run_id

    # flows -------------------------------------------------------------------------------------
    def new_flow_id(self) -> str:
        """The id of the next flow this transaction inserts: a keyed permutation of its seq
        (``SqliteStore.next_seq``)."""
        seq = self._store.next_seq(self._conn, "flows")
        flow_id = self._ids().id_of(seq)
        self._allocated = (seq, flow_id)
        return flow_id

    def _ids(self) -> SeqIds:
        ids = self._store.flow_ids
        if ids is None:
            raise StoreUnavailable("store unavailable")
        return ids

    def _flow_row(self, flow_id: str, owner_key: str | None) -> tuple[Any, ...] | None:
        """By seq when the id is one of this scheme's, else through the index of the other ids."""
        conn = self._conn
        seq = self._ids().seq_of(flow_id)
        if seq is not None and seq < MAX_SEQ:
            if owner_key is None:
                row = conn.execute(_SELECT_BY_SEQ, (seq, flow_id)).fetchone()
            else:
                row = conn.execute(_SELECT_BY_SEQ_OWNED, (seq, flow_id, owner_key)).fetchone()
            if row is not None:
                return cast(tuple[Any, ...], row)
        if owner_key is None:
            return cast("tuple[Any, ...] | None", conn.execute(_SELECT_RANDOM, (flow_id,)).fetchone())
        return cast("tuple[Any, ...] | None", conn.execute(_SELECT_RANDOM_OWNED, (flow_id, owner_key)).fetchone())

    def get_flow(self, flow_id: str, owner_key: str) -> Flow | None:
        row = self._flow_row(flow_id, owner_key)
        return None if row is None else _flow_from_row(row)

    def list_flow_views(self, owner_key: str) -> msgspec.Raw:
        """Every flow of the owner as FlowViews, newest first, rendered by SQLite in one statement.

        The ``sqlite3`` module holds the GIL for each row it returns, and building 10 000 records
        and views in Python held it ~40 ms more; beside other threads wanting the GIL (the event
        loop above all) each hand-over waited. One step renders the array without the GIL, and the
        answer embeds it as it is."""
        (text,) = self._conn.execute(_LIST_FLOW_VIEWS, (owner_key,)).fetchone()
        return msgspec.Raw(text)

    def latest_flow(self, owner_key: str, *, active_only: bool) -> Flow | None:
        clause = FQ["where_owner_active_newest"] if active_only else FQ["where_owner_newest_one"]
        row = self._conn.execute(f"{_SELECT_FLOW} {clause}", (owner_key,)).fetchone()
        return None if row is None else _flow_from_row(row)

    def insert_flow(self, flow: Flow) -> int:
        params = _flow_params(flow)
        allocated, self._allocated = self._allocated, None
        if allocated is not None and allocated[1] == flow.flow_id:
            params.append(allocated[0])
            self._conn.execute(_INSERT_FLOW_BY_SEQ, params)
            return allocated[0]
        self._store.forget_seq("flows")  # AUTOINCREMENT takes the next seq: count from the table again
        return int(self._conn.execute(_INSERT_FLOW, params).lastrowid or 0)

    def update_flow_if_revision(self, flow: Flow, expected_revision: int) -> bool:
        params = _flow_params(flow)
        params.append(flow.seq)
        params.append(expected_revision)
        return self._conn.execute(_UPDATE_FLOW, params).rowcount == 1

    # tasks -------------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> Task | None:
        row = self._conn.execute(f"{_SELECT_TASK} WHERE task_id = ?", (task_id,)).fetchone()
        return None if row is None else _task_from_row(row)

    def list_tasks(self, flow_id: str) -> list[Task]:
        rows = self._conn.execute(f"{_SELECT_TASK} {FQ['where_flow_tasks_newest']}", (flow_id,)).fetchall()
        return [_task_from_row(r) for r in rows]

    def task_counts(self, flow_id: str) -> list[tuple[str, str, int]]:
        return [(str(s), str(r), int(n)) for s, r, n in self._conn.execute(FQ["flow_task_counts"], (flow_id,))]

    def tasks_with_run_id(self, flow_id: str, run_id: str) -> list[Task]:
        rows = self._conn.execute(f"{_SELECT_TASK} {FQ['where_flow_run_id']}", (flow_id, run_id)).fetchall()
        return [_task_from_row(r) for r in rows]

    def insert_task(self, task: Task) -> Task:
        params = _task_params(task)
        params.pop("seq")
        cur = self._conn.execute(_INSERT_TASK, params)
        return msgspec.structs.replace(task, seq=int(cur.lastrowid or 0))

    def update_task(self, task: Task) -> None:
        params = _task_params(task)
        params.pop("seq")
        self._conn.execute(_UPDATE_TASK, params)

    # sessions and notifications ---------------------------------------------------------------
    def session_parent(self, key: str) -> tuple[bool, str | None]:
        row = self._conn.execute(FQ["session_parent"], (key,)).fetchone()
        return (False, None) if row is None else (True, row[0])

    def record_child_session(self, key: str, parent: str, agent_id: str, now_ms: int) -> None:
        self._conn.execute(FQ["insert_child_session"], (key, agent_id, self._store.new_session_id(), parent, now_ms))

    def queue_system_event(self, session_key: str, agent_id: str, text: str, now_ms: int,
                           wake_reason: str | None) -> str:
        prepared = prepare_event_text(text)
        if not prepared:
            return "coalesced"
        result = self._store.queue_event_sync(self._conn, session_key, agent_id, prepared, now_ms, wake_reason)
        self._events.append((result.outcome, result.dropped, session_key))
        return result.outcome

    # retention and operators ---------------------------------------------------------------------
    def delete_expired_tasks(self, now_ms: int) -> int:
        return int(self._conn.execute(FQ["delete_expired_tasks"], (now_ms,)).rowcount)

    def delete_ended_flows(self, ended_before_ms: int) -> int:
        return int(self._conn.execute(FQ["delete_ended_flows"], (ended_before_ms,)).rowcount)

    def admin_list_flows(self, owner_key: str | None, statuses: Sequence[str], limit: int) -> list[Flow]:
        clauses, params = [], []
        if owner_key is not None:
            clauses.append("owner_key = ?")
            params.append(owner_key)
        if statuses:
            clauses.append(f"status IN ({', '.join('?' for _ in statuses)})")
            params.extend(statuses)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        rows = self._conn.execute(
            f"{_SELECT_FLOW} {where}ORDER BY created_at DESC, seq DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [_flow_from_row(r) for r in rows]

    def admin_get_flow(self, flow_id: str) -> Flow | None:
        row = self._flow_row(flow_id, None)
        return None if row is None else _flow_from_row(row)

    # runs, transcripts, heartbeats (runtime.ports.RuntimeTx) -----------------------------------------
    def claim_runs(self, instance: str, now_ms: int, lease_until: int, limit: int,
                   skip: Collection[str] = ()) -> list[str]:
        rows = self._conn.execute(FQ["claimable_runs"], (now_ms, limit + len(skip))).fetchall()
        claimed = [r for r in rows if r[0] not in skip][:limit]
        for _, seq in claimed:
            self._conn.execute(FQ["claim_run"], (seq, instance, lease_until, now_ms))
        return [r[0] for r in claimed]

    def renew_run_lease(self, run_id: str, instance: str, lease_until: int) -> bool:
        params = (run_id, instance, lease_until, self._store.run_seq(run_id))
        return self._conn.execute(FQ["renew_run_lease"], params).rowcount == 1

    def release_run(self, run_id: str, instance: str, now_ms: int) -> None:
        self._conn.execute(FQ["release_run"], (run_id, instance, now_ms, self._store.run_seq(run_id)))

    def finish_run(self, run_id: str, status: str, reply: str | None, error: str | None, now_ms: int) -> None:
        params = (run_id, status, reply, error, now_ms, self._store.run_seq(run_id))
        self._conn.execute(FQ["finish_run"], params)

    def append_transcript(self, session_key: str, session_id: str, role: str, text: str, run_id: str | None,
                          now_ms: int) -> None:
        self._conn.execute(FQ["append_transcript"], (session_key, session_id, role, text, run_id, now_ms))

    def transcript_tail(self, session_key: str, limit: int) -> list[tuple[str, str]]:
        if limit <= 0:
            return []
        return [(r[0], r[1]) for r in self._conn.execute(FQ["transcript_tail"], (session_key, limit))]

    def session_id_of(self, session_key: str, agent_id: str, now_ms: int) -> str:
        row = self._conn.execute(FQ["session_id_of"], (session_key,)).fetchone()
        if row is not None:
            return str(row[0])
        session_id = self._store.new_session_id()
        self._conn.execute(Q["insert_session"], (session_key, agent_id, session_id, now_ms))
        return session_id

    def schedule_heartbeat(self, agent_id: str, every_ms: int, now_ms: int) -> None:
        row = self._conn.execute(FQ["heartbeat_schedule_of"], (agent_id,)).fetchone()
        due, last_ended = (row[0], row[1]) if row else (None, None)
        # (a last turn that ended after now: the wall clock stepped back since; counted from now)
        scheduled = (now_ms if last_ended is None else min(last_ended, now_ms)) + every_ms if every_ms > 0 else None
        if due is not None and self._wake_pending(agent_id):  # pulled by a wake: keep it, within a second
            due = min(due, now_ms + WAKE_DUE_MS)
            scheduled = due if scheduled is None else min(due, scheduled)
        self._conn.execute(FQ["set_heartbeat_due"], (agent_id, scheduled, now_ms))

    def _wake_pending(self, agent_id: str) -> bool:
        return bool(self._conn.execute(Q["count_pending_heartbeat_requests"], (agent_id,)).fetchone()[0])

    def rewind_deadlines(self, now_ms: int, step_ms: int, lease_ms: int, retry_ms: int,
                         every_ms: Mapping[str, int]) -> int:
        now_args = (now_ms, step_ms, now_ms + lease_ms)
        changed = self._conn.execute(FQ["rewind_run_leases"], now_args).rowcount
        changed += self._conn.execute(FQ["rewind_delivery_times"], (*now_args, now_ms + retry_ms)).rowcount
        changed += self._conn.execute(FQ["rewind_heartbeat_lease"], now_args).rowcount
        for agent_id, every in every_ms.items():
            cap = now_ms + (WAKE_DUE_MS if self._wake_pending(agent_id) or every <= 0 else every)
            changed += self._conn.execute(FQ["rewind_heartbeat_due"], (now_ms, step_ms, cap, agent_id)).rowcount
        return changed

    def renew_heartbeat_lease(self, agent_id: str, instance: str, lease_until: int) -> bool:
        return self._conn.execute(FQ["renew_heartbeat_lease"], (agent_id, instance, lease_until)).rowcount == 1

    def release_heartbeat(self, agent_id: str, instance: str) -> None:
        self._conn.execute(FQ["release_heartbeat"], (agent_id, instance))

    def claim_heartbeats(self, instance: str, now_ms: int, lease_until: int) -> list[str]:
        agents = [r[0] for r in self._conn.execute(FQ["due_heartbeats"], (now_ms,)).fetchall()]
        for agent_id in agents:
            self._conn.execute(FQ["claim_heartbeat"], (agent_id, instance, lease_until, now_ms))
        return agents

    def last_pending_heartbeat_request(self, agent_id: str) -> int:
        return int(self._conn.execute(FQ["last_pending_heartbeat_request"], (agent_id,)).fetchone()[0])

    def finish_heartbeat(self, agent_id: str, next_due: int | None, answered_upto: int, now_ms: int) -> None:
        """Consume the wake requests the turn answered (pending when it read its events: ids up to
        ``answered_upto``); later ones pull the next turn to end + 1 s."""
        self._conn.execute(FQ["consume_heartbeat_requests"], (agent_id, answered_upto, now_ms))
        if self._wake_pending(agent_id):
            next_due = now_ms + WAKE_DUE_MS if next_due is None else min(next_due, now_ms + WAKE_DUE_MS)
        self._conn.execute(FQ["finish_heartbeat"], (agent_id, next_due, now_ms))

    def pending_events(self, session_key: str) -> list[tuple[int, int, str]]:
        return [(r[0], r[1], r[2]) for r in self._conn.execute(FQ["pending_events_of"], (session_key,))]

    def consume_events(self, seqs: Sequence[int], run_id: str, now_ms: int) -> None:
        for seq in seqs:
            self._conn.execute(FQ["consume_event"], (seq, run_id, now_ms))

    def fail_events(self, seqs: Sequence[int], max_failed_turns: int, now_ms: int) -> int:
        dropped = 0
        for seq in seqs:
            row = self._conn.execute(FQ["fail_event"], (seq, max_failed_turns, now_ms)).fetchone()
            dropped += row is not None and row[0] == "dropped"
        return dropped

    def last_route(self, main_session_key: str) -> tuple[str | None, str | None]:
        row = self._conn.execute(FQ["last_route"], (main_session_key,)).fetchone()
        return (None, None) if row is None else (row[0], row[1])

    def set_last_route(self, main_session_key: str, agent_id: str, channel: str, to: str, now_ms: int) -> None:
        self.session_id_of(main_session_key, agent_id, now_ms)
        self._conn.execute(FQ["set_last_route"], (main_session_key, channel, to, now_ms))

    def insert_finished_run(self, run: NewRun, session_id: str, status: str, reply: str | None,
                            error: str | None, now_ms: int) -> None:
        """A heartbeat turn's run: its id was made before the row (the turn ran under it), so it is a
        random one, found through the index of random ids."""
        run_id = self._store.insert_run(self._conn, run, session_id, None)
        # no seq to try: the statements find the row through runs_random_id
        self._conn.execute(FQ["finish_run"], (run_id, status, reply, error, now_ms, None))
        self._conn.execute(FQ["set_run_started"], (run_id, run.created_at, None))  # a turn starts when created

    def new_run_id(self) -> str:
        """The id of the next run this transaction enqueues: a keyed permutation of its seq."""
        seq, run_id = self._store.new_run_id(self._conn)
        self._allocated_run = (seq, run_id)
        return run_id

    def enqueue_run(self, run: NewRun) -> None:
        session_id = self._store.new_session_id()
        if not start_transcript(self._conn, run.session_key, run.agent_id, session_id, run.created_at):
            self.session_id_of(run.session_key, run.agent_id, run.created_at)
        allocated, self._allocated_run = self._allocated_run, None
        seq = allocated[0] if allocated is not None and allocated[1] == run.run_id else None
        self._store.insert_run(self._conn, run, session_id, seq)

    def run_transcript(self, run_id: str) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._conn.execute(FQ["run_transcript"], (run_id,))]

    def record_delivery(self, delivery: DeliveryRecord, now_ms: int) -> None:
        d = delivery
        self._conn.execute(FQ["insert_delivery"], (d.delivery_id, d.run_id, d.agent_id, d.channel, d.target, d.text,
                                                   d.status, 1 if d.attempt_outcome else 0, d.error, now_ms))
        if d.attempt_outcome:
            self._conn.execute(FQ["insert_delivery_attempt"], (d.delivery_id, now_ms, d.attempt_outcome, None, d.error))

    def claim_deliveries(self, instance: str, now_ms: int, lease_until: int, limit: int,
                         skip: Collection[str] = (), per_channel: int | None = None,
                         busy: Mapping[str, int] | None = None) -> list[tuple[str, str]]:
        in_flight = msgspec.json.encode(busy or {}).decode()
        rows = self._conn.execute(FQ["claimable_deliveries"],
                                  (now_ms, limit + len(skip), per_channel or limit, in_flight)).fetchall()
        claimed = [(r[0], r[1]) for r in rows if r[0] not in skip][:limit]
        for delivery_id, _ in claimed:
            self._conn.execute(FQ["claim_delivery"], (delivery_id, instance, lease_until))
        return claimed

    def renew_delivery_lease(self, delivery_id: str, instance: str, lease_until: int) -> bool:
        return self._conn.execute(FQ["renew_delivery_lease"], (delivery_id, instance, lease_until)).rowcount == 1

    def release_delivery(self, delivery_id: str, instance: str) -> None:
        self._conn.execute(FQ["release_delivery"], (delivery_id, instance))

    def get_delivery(self, delivery_id: str) -> DeliveryJob | None:
        conn = self._conn
        row = conn.execute(FQ["get_delivery"], (delivery_id,)).fetchone()
        if row is None:
            return None
        run_id = row[1]
        run = conn.execute(FQ["delivery_run"], (run_id, self._store.run_seq(run_id))).fetchone()
        kind, name, session_key, inputs = run if run is not None else (None, None, None, None)
        return DeliveryJob(
            delivery_id=row[0], run_id=run_id, agent_id=row[2], channel=row[3], target=row[4], text=row[5],
            status=row[6], attempts=row[7], parts_sent=row[8], created_at=row[10], leased_by=row[13],
            run_kind=kind, run_name=name, session_key=session_key,
            run_inputs=_decode(inputs) if inputs else {},
        )

    def delivery_part_sent(self, delivery_id: str, parts_sent: int, message_id: str | None, now_ms: int) -> None:
        self._conn.execute(FQ["delivery_part_sent"], (delivery_id, parts_sent, message_id, now_ms))

    def finish_delivery_attempt(self, delivery_id: str, status: str, next_attempt_at: int | None,
                                outcome: str, http_status: int | None, error: str | None, now_ms: int) -> None:
        """One attempt's outcome: ``delivered``, ``retry`` (status stays pending) or ``dead``."""
        self._conn.execute(FQ["finish_delivery_attempt"], (delivery_id, status, next_attempt_at, error, now_ms))
        self._conn.execute(FQ["insert_delivery_attempt"], (delivery_id, now_ms, outcome, http_status, error))

    def requeue_delivery(self, delivery_id: str, now_ms: int) -> bool:
        """A dead delivery back to pending with its attempts reset (``hookgate replay``)."""
        return self._conn.execute(FQ["requeue_delivery"], (delivery_id, now_ms)).rowcount == 1

    def delivery_status(self, delivery_id: str) -> str | None:
        row = self._conn.execute("SELECT status FROM deliveries WHERE delivery_id = ?", (delivery_id,)).fetchone()
        return None if row is None else str(row[0])

    def dead_deliveries(self, channel: str | None, since_ms: int | None) -> list[str]:
        sql = "SELECT delivery_id FROM deliveries WHERE status = 'dead'"
        params: list[Any] = []
        if channel is not None:
            sql += " AND channel = ?"
            params.append(channel)
        if since_ms is not None:
            sql += " AND updated_at >= ?"
            params.append(since_ms)
        return [r[0] for r in self._conn.execute(sql + " ORDER BY seq", params)]

    def due_deliveries(self, now_ms: int) -> int:
        return int(self._conn.execute(FQ["due_delivery_count"], (now_ms,)).fetchone()[0])

    def next_job_due(self, now_ms: int) -> int | None:
        row = self._conn.execute(FQ["next_job_due"], (now_ms,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def delete_finished_deliveries(self, updated_before_ms: int) -> int:
        return int(self._conn.execute(FQ["delete_finished_deliveries"], (updated_before_ms,)).rowcount)

    def run_deliveries(self, run_id: str) -> list[dict[str, Any]]:
        out = []
        for row in self._conn.execute(FQ["run_deliveries"], (run_id,)).fetchall():
            attempts = [{"at": a[0], "outcome": a[1], "httpStatus": a[2], "error": a[3]}
                        for a in self._conn.execute(FQ["delivery_attempts_of"], (row[0],))]
            out.append({"deliveryId": row[0], "channel": row[1], "to": row[2], "status": row[3],
                        "attempts": row[4], "lastError": row[5], "createdAt": row[6], "deliveredAt": row[7],
                        "nextAttemptAt": row[8], "partsSent": row[9], "messageIds": msgspec.json.decode(row[10]),
                        "attemptLog": attempts})
        return out

    def queued_runs(self) -> int:
        return int(self._conn.execute(FQ["queued_run_count"]).fetchone()[0])

    def due_heartbeats(self, now_ms: int) -> int:
        return len(self._conn.execute(FQ["due_heartbeats"], (now_ms,)).fetchall())  # one row per agent at most

    # idempotency ---------------------------------------------------------------------------------
    def get_webhook_response(self, route_id: str, key: str, now_ms: int) -> StoredResponse | None:
        row = self._conn.execute(FQ["get_webhook_response"], (route_id, key, now_ms)).fetchone()
        return None if row is None else StoredResponse(row[0], int(row[1]), bytes(row[2]))

    def put_webhook_response(self, route_id: str, key: str, response: StoredResponse, now_ms: int,
                             expires_at: int) -> None:
        self._conn.execute(
            FQ["put_webhook_response"],
            (route_id, key, response.body_sha256, response.status, response.body, now_ms, expires_at),
        )


Runner = Callable[[SqliteFlowTx], Any]
