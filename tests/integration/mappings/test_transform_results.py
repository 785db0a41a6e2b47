"""What a transform returns or does, at the edges of hooks.md §6.5: a ``str`` subclass, a lone surrogate,
a coroutine that outlives its timeout; and the mapping id as logs show it (operations.md §2)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, hooks_config

TRANSFORMS = '''
import asyncio
import time

class Text(str):
    """A str subclass: isinstance(x, str) is True."""

def str_subclass(ctx):
    return {"message": Text("hello from a str subclass")}

async def swallow(ctx):
    # a bare "except" (or except BaseException) also catches the timeout's cancellation
    try:
        await asyncio.sleep(5)
    except BaseException:
        await asyncio.sleep(2)
    return {"message": "very late"}

async def blocker(ctx):
    time.sleep(1.2)  # blocks the event loop: no timer can cut it short
    return {"message": "blocked"}

async def napper(ctx):
    await asyncio.sleep(0.5)  # its own work is nothing: it only waits
    return {"message": "rested"}

async def hog(ctx):
    time.sleep(0.9)  # blocks the loop, but for less than the limit
    return {"message": "hogged"}

def boom(ctx):
    raise ValueError("x")

def surrogate(ctx):
    return {"message": "half a pair: \\ud800"}
'''


def _config(tmp: Path, **hooks: Any) -> dict[str, Any]:
    d = tmp / "hooks" / "transforms"
    d.mkdir(parents=True, exist_ok=True)
    (d / "t.py").write_text(TRANSFORMS)
    return hooks_config(
        mappings=[
            {"id": "sub", "match": {"path": "sub"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "str_subclass"}},
            {"id": "swallow", "match": {"path": "swallow"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "swallow"}},
            {"id": "blocker", "match": {"path": "blocker"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "blocker"}},
            {"id": "napper", "match": {"path": "napper"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "napper"}},
            {"id": "hog", "match": {"path": "hog"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "hog"}},
            {"id": "bad\tid\n  two", "match": {"path": "boom"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "boom"}},
            {"id": "surrogate", "match": {"path": "surrogate"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "surrogate"}},
        ],
        **hooks,
    )


def test_transform_message_that_is_a_str_subclass_is_dispatched(gateway_factory: GatewayFactory,
                                                               tmp_path: Path) -> None:
    """hooks.md §6.5 merge: "agent: `message` = `o["message"]` if a string, else the base message".
    A `str` subclass instance is a string (the code's own isinstance check accepts it), so the run is
    accepted: §3 "mapped agent accepted → 200 as agent". Even if it were a "bad value", §3 requires
    `500 {"ok":false,"error":"hook mapping failed"}` — never the generic "Internal Server Error"."""
    gw = gateway_factory(_config(tmp_path))
    with gw.client() as c:
        r = c.post("/hooks/sub", json={}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is True and isinstance(r.json()["runId"], str)
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE kind = 'hook'").fetchone()[0] == 1


def test_async_transform_that_outlives_the_timeout_fails(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """hooks.md §6.5: "A call lasting longer than `hooks.transformTimeoutSeconds` fails (500)." and §3
    "transform raised, timed out or returned a bad value → 500 {"ok":false,"error":"hook mapping failed"}".
    An async transform that catches the timeout's cancellation and goes on for 2 s more (with a 0.5 s
    limit) must still fail, at its deadline rather than when it finally returns."""
    gw = gateway_factory(_config(tmp_path, transformTimeoutSeconds=0.5))
    with gw.client() as c:
        started = time.monotonic()
        r = c.post("/hooks/swallow", json={}, headers=AUTH)
        took = time.monotonic() - started
    assert (r.status_code, r.content) == (500, b'{"ok":false,"error":"hook mapping failed"}'), (r.text, took)
    assert took < 2.0  # not the 2.5 s the transform goes on for
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_async_transform_that_blocks_past_the_timeout_fails(gateway_factory: GatewayFactory,
                                                            tmp_path: Path) -> None:
    """hooks.md §6.5, as above, for an ``async def`` transform that blocks the event loop
    (``time.sleep``): nothing can interrupt it, but a call that returned after its limit has lasted
    longer than it, so it fails all the same, and nothing is dispatched. It answered 200."""
    gw = gateway_factory(_config(tmp_path, transformTimeoutSeconds=0.5))
    with gw.client() as c:
        r = c.post("/hooks/blocker", json={}, headers=AUTH)
    assert (r.status_code, r.content) == (500, b'{"ok":false,"error":"hook mapping failed"}'), r.text
    failed = [e for e in gw.flushed_log_events() if e.get("event") == "hook.mapping_failed"]
    assert failed[-1]["error_type"] == "TimeoutError" and failed[-1]["mapping"] == "blocker", failed
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_a_transform_kept_waiting_by_another_that_blocks_is_not_timed_out(gateway_factory: GatewayFactory,
                                                                          tmp_path: Path) -> None:
    """The limit is on a call's own time: ``napper`` waits 0.5 s of a 1 s limit, and ``hog`` blocks the
    event loop 0.9 s from 0.3 s on, so ``napper`` resumes after its deadline having done nothing
    itself. Both are within the limit and both are dispatched; the one blocking is not blamed on the
    other (a deadline check failed ``napper``)."""
    gw = gateway_factory(_config(tmp_path, transformTimeoutSeconds=1))
    answers: dict[str, int] = {}

    def post(path: str, delay: float) -> None:
        time.sleep(delay)
        with gw.client() as c:
            answers[path] = c.post(f"/hooks/{path}", json={}, headers=AUTH).status_code

    threads = [threading.Thread(target=post, args=("napper", 0.0)), threading.Thread(target=post, args=("hog", 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == {"napper": 200, "hog": 200}, answers
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_logged_mapping_id_is_sanitised(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """operations.md §2: "Free-text values that are logged (hook names, mapping ids, error messages) are
    sanitised: control characters → space, whitespace collapsed, cut to 500 characters." hooks.md §6.5:
    the `hook.mapping_failed` warning names the mapping id."""
    gw = gateway_factory(_config(tmp_path))
    with gw.client() as c:
        r = c.post("/hooks/boom", json={}, headers=AUTH)
    assert r.status_code == 500
    events = gw.flushed_log_events()
    failed = [e for e in events if e.get("event") == "hook.mapping_failed"]
    assert failed and failed[-1]["mapping"] == "bad id two", failed
    access = [e for e in events if e.get("event") == "http.request" and e.get("path") == "/hooks/boom"]
    assert access and access[-1]["route"] == "mapping:bad id two", access


def test_transform_string_with_a_lone_surrogate_is_a_bad_value(gateway_factory: GatewayFactory,
                                                               tmp_path: Path) -> None:
    """hooks.md §3: "transform ... returned a bad value → 500 hook mapping failed": a string that cannot
    be stored (not valid Unicode) is one, not an internal error, and nothing is committed."""
    gw = gateway_factory(_config(tmp_path))
    with gw.client() as c:
        r = c.post("/hooks/surrogate", json={}, headers=AUTH)
    assert (r.status_code, r.content) == (500, b'{"ok":false,"error":"hook mapping failed"}'), r.text
    failed = [e for e in gw.flushed_log_events() if e.get("event") == "hook.mapping_failed"]
    assert failed[-1]["error_type"] == "TransformResultError"
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
