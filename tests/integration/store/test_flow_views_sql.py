"""``list_flows`` is rendered by SQLite from ``FLOW_VIEW_LAYOUT`` (store/sqlite/flows.py), every other
FlowView by ``flow_view`` in Python: the two must give the same JSON for any stored flow, in the
order of webhooks.md §4.3."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from typing import Any

import msgspec
import pytest
from storetest import NOW, StoreFactory

from hookgate.flows.model import Flow
from hookgate.flows.views import FLOW_VIEW_LAYOUT, flow_view, newest_first
from hookgate.store.sqlite import backend
from hookgate.store.sqlite.flows import SqliteFlowTx
from hookgate.webhooks.schema import UNSET

OWNER = "agent:ops:views"

TEXTS = ["", "plain", "emoji 🚀 ümlaut שלום", 'quote " backslash \\ slash /',
         "".join(map(chr, range(32))) + "\x7f\u2028\u2029\ufeff", "x" * 5000]
JSON_VALUES: list[Any] = [UNSET, None, True, 0, -1, 9007199254740991, 1.5e-07, 1e21, -0.0, 0.1, "",
                          "[not json, just text]", [], {}, {"nested": [1, {"deep": ["ü", None, 2.5]}]}]
INTS = [None, 0, 1, NOW]


def flows() -> list[Flow]:
    """Every rule's cases, cycled so that each value of each field appears at least once."""
    out = []
    for i, (text, state, wait, number) in enumerate(
        itertools.islice(zip(itertools.cycle(TEXTS), itertools.cycle(JSON_VALUES),
                             itertools.cycle(reversed(JSON_VALUES)), itertools.cycle(INTS)), 60)
    ):
        out.append(Flow(
            flow_id=f"00000000-0000-4000-8000-{i:012d}", owner_key=OWNER, goal=text or "g",
            created_at=NOW + i // 3,  # ties on createdAt: the later seq first
            updated_at=NOW + i, controller_id=text or None if i % 2 else text,
            current_step=text if i % 3 else None, blocked_task_id=text or None,
            blocked_summary=text if i % 4 else "", state_json=state, wait_json=wait,
            cancel_requested_at=number, ended_at=INTS[(i + 1) % len(INTS)], revision=i,
            status=["queued", "running", "waiting", "succeeded"][i % 4],
        ))
    return out


async def test_list_flow_views_matches_flow_view(make_store: StoreFactory) -> None:
    store = await make_store()
    made = flows()

    def insert(tx: Any) -> list[Flow]:
        return [msgspec.structs.replace(f, seq=tx.insert_flow(f)) for f in made]

    stored = await store.flow_write(insert)
    raw = await store.list_flow_views(OWNER)
    listed = json.loads(bytes(raw))
    expected = [json.loads(msgspec.json.encode(flow_view(f))) for f in newest_first(stored)]
    assert listed == expected
    # and as bytes too: what a client that compares bodies would see
    assert bytes(raw) == msgspec.json.encode([flow_view(f) for f in newest_first(stored)])


async def test_list_flow_views_of_no_flows(make_store: StoreFactory) -> None:
    store = await make_store()
    raw = await store.list_flow_views("agent:ops:nobody")
    assert bytes(raw) == b"[]"


def test_layout_is_flow_view_written_out() -> None:
    """Each key of the layout appears (or not) by its rule, in the layout's order."""
    empty = Flow(flow_id="f", owner_key=OWNER, goal="g", created_at=1, updated_at=2, controller_id="",
                 current_step=None, state_json=UNSET, wait_json=UNSET)
    assert list(flow_view(empty)) == [k for k, _, rule in FLOW_VIEW_LAYOUT if rule in ("str", "int")]
    full = Flow(flow_id="f", owner_key=OWNER, goal="g", created_at=1, updated_at=2, controller_id="c",
                current_step="s", blocked_task_id="t", blocked_summary="b", state_json=None, wait_json=0,
                cancel_requested_at=3, ended_at=4)
    assert list(flow_view(full)) == [k for k, _, _ in FLOW_VIEW_LAYOUT]
    for key, field, _ in FLOW_VIEW_LAYOUT:
        assert flow_view(full)[key] == getattr(full, field)


@pytest.mark.parametrize(("threshold", "thread"), [(0, "bulk"), (4, "bulk"), (5, "pool"), (1000, "pool")])
async def test_long_lists_take_the_bulk_thread_short_ones_the_pool(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, threshold: int, thread: str
) -> None:
    """Five flows: a list longer than BULK_LIST_MIN_FLOWS is rendered on the bulk thread, one no longer
    on the read pool (a short list never waits behind another owner's long one); the same answer."""
    monkeypatch.setattr(backend, "BULK_LIST_MIN_FLOWS", threshold)
    ran_on: list[str] = []
    render = SqliteFlowTx.list_flow_views

    def recording(tx: SqliteFlowTx, owner_key: str) -> msgspec.Raw:
        ran_on.append(threading.current_thread().name)
        return render(tx, owner_key)

    monkeypatch.setattr(SqliteFlowTx, "list_flow_views", recording)
    store = await make_store()
    made = flows()[:5]
    stored = await store.flow_write(lambda tx: [msgspec.structs.replace(f, seq=tx.insert_flow(f)) for f in made])
    assert bytes(await store.list_flow_views(OWNER)) == msgspec.json.encode(
        [flow_view(f) for f in newest_first(stored)])
    prefix = {"bulk": "hookgate-store-bulk-read", "pool": "hookgate-store-read"}[thread]
    assert len(ran_on) == 1 and ran_on[0].startswith(prefix + "_"), ran_on


async def test_rows_hookgate_did_not_write_still_list_as_json(make_store: StoreFactory) -> None:
    """Rows written by hand (the table is not STRICT): an integer column holding text or a real, a
    JSON column holding no JSON or JSON spelled otherwise. The list stays valid JSON — one odd row
    must not spoil every flow's answer — and shows each value as get_flow's Python path would read it
    where it can (text stays text; invalid JSON becomes a string)."""
    store = await make_store()
    [good] = await store.flow_write(lambda tx: [msgspec.structs.replace(f, seq=tx.insert_flow(f)) for f in flows()[:1]])
    with sqlite3.connect(store.path) as conn:
        base = {"owner_key": OWNER, "sync_mode": "task_mirrored", "controller_id": None, "status": "running",
                "notify_policy": "done_only", "goal": "by hand", "created_at": NOW, "updated_at": NOW}
        odd = [
            {"flow_id": "hand-1", "revision": "n/a", "updated_at": 1e20, "state_json": "{not json"},
            {"flow_id": "hand-2", "revision": 2.5, "ended_at": "soon", "wait_json": '{"a": [1, 2]}'},
            {"flow_id": "hand-3", "revision": 3, "cancel_requested_at": 0.5, "state_json": '"\\u00e9"'},
        ]
        for row in odd:
            values = {**base, **row}
            conn.execute(f"INSERT INTO flows ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
                         list(values.values()))
    listed = json.loads(bytes(await store.list_flow_views(OWNER)))  # valid JSON, every row in it
    by_id = {f["flowId"]: f for f in listed}
    assert set(by_id) == {good.flow_id, "hand-1", "hand-2", "hand-3"}
    assert by_id[good.flow_id] == json.loads(msgspec.json.encode(flow_view(good)))
    assert by_id["hand-1"]["revision"] == "n/a" and by_id["hand-1"]["updatedAt"] == 1e20
    assert by_id["hand-1"]["stateJson"] == "{not json"
    assert by_id["hand-2"]["revision"] == 2.5 and by_id["hand-2"]["endedAt"] == "soon"
    assert by_id["hand-2"]["waitJson"] == {"a": [1, 2]}
    assert by_id["hand-3"]["cancelRequestedAt"] == 0.5 and by_id["hand-3"]["stateJson"] == "é"
