"""A transform with a bug stays its own mapping's problem (docs/mappings.md): a slow or failing module
import, a result that raises when read, a result of any size — on a real server."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from gateway import AUTH, GatewayFactory, hooks_config, wait_for

SLOW_IMPORT = """
import time
time.sleep(6)

def transform(ctx):
    return {"text": "slow ready"}
"""

QUICK = """
def transform(ctx):
    return {"text": "quick"}
"""

FAILING = """
with open({marks!r}, "a") as f:
    f.write("imported\\n")
raise RuntimeError("broken at import")
"""

RAISING_DICT = """
class Nasty(dict):
    def get(self, key, default=None):
        raise RuntimeError("payload text")

def transform(ctx):
    return Nasty(text="x")
"""

RAISING_VALUE = """
class Weird(int):
    def __lt__(self, other):
        raise RuntimeError("payload text")

def transform(ctx):
    return {"message": "m", "timeoutSeconds": Weird(5)}
"""

HUGE = """
def transform(ctx):
    return {"message": "y" * ctx.payload["n"]}
"""


def _config(tmp_path: Path, modules: dict[str, str], action: str = "wake") -> dict[str, Any]:
    d = tmp_path / "hooks" / "transforms"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in modules.items():
        (d / f"{name}.py").write_text(text)
    mappings = [{"id": name, "match": {"path": name}, "action": action, "textTemplate": "base",
                 "messageTemplate": "base", "transform": {"module": f"{name}.py"}} for name in modules]
    return hooks_config(mappings=mappings)


def test_a_slow_module_import_does_not_hold_another_modules_import(gateway_factory: GatewayFactory,
                                                                    tmp_path: Path) -> None:
    """One lock for every import made the first request of any other mapping, and /metrics (which
    shared the loop's executor), wait for a module whose top level took 20 s."""
    gw = gateway_factory(_config(tmp_path, {"slow": SLOW_IMPORT, "quick": QUICK}))
    def post_slow() -> int:
        with gw.client() as own:
            return own.post("/hooks/slow", json={}, headers=AUTH).status_code

    with concurrent.futures.ThreadPoolExecutor(2) as pool, gw.client() as c:
        slow = pool.submit(post_slow)
        time.sleep(0.5)  # the slow import has begun
        assert c.post("/hooks/quick", json={}, headers=AUTH).status_code == 200
        assert c.get("/metrics").status_code == 200
        assert not slow.done(), "the slow import finished first: the test proves nothing"
        assert slow.result(timeout=30) == 200  # and it is not failed for its own import's time


def test_a_module_that_fails_to_import_is_not_run_again_until_it_changes(gateway_factory: GatewayFactory,
                                                                         tmp_path: Path) -> None:
    """hooks.md §6.5: imported on first use, again when the file changes. A failing module ran its
    top level again on every request (one at a time, under the import lock)."""
    marks = tmp_path / "marks"
    gw = gateway_factory(_config(tmp_path, {"failing": FAILING.format(marks=str(marks))}))
    with gw.client() as c:
        for _ in range(3):
            r = c.post("/hooks/failing", json={}, headers=AUTH)
            assert (r.status_code, r.json()) == (500, {"ok": False, "error": "hook mapping failed"})
        assert marks.read_text().splitlines() == ["imported"]
        module = tmp_path / "hooks" / "transforms" / "failing.py"
        module.write_text(module.read_text() + "\n# edited\n")
        assert c.post("/hooks/failing", json={}, headers=AUTH).status_code == 500
        assert marks.read_text().splitlines() == ["imported"] * 2
        gw.signal(signal.SIGHUP)  # a reload tries it again (what it imports may be installed now)
        wait_for(lambda: any(e.get("event") == "config.loaded" and "trigger" in e for e in gw.flushed_log_events()))
        assert c.post("/hooks/failing", json={}, headers=AUTH).status_code == 500
        assert marks.read_text().splitlines() == ["imported"] * 3
    failed = [e for e in gw.flushed_log_events() if e["event"] == "hook.mapping_failed"]
    assert [e["error_type"] for e in failed] == ["RuntimeError"] * 5
    assert "broken at import" not in str(failed)


@pytest.mark.parametrize("module", [RAISING_DICT, RAISING_VALUE])
def test_a_result_that_raises_when_read_is_mapping_failed(gateway_factory: GatewayFactory, tmp_path: Path,
                                                          module: str) -> None:
    """hooks.md §6.5: an exception or bad value → 500 "hook mapping failed"; it was the generic
    500 "Internal Server Error" with no hook.mapping_failed line."""
    gw = gateway_factory(_config(tmp_path, {"nasty": module}, action="agent"))
    with gw.client() as c:
        r = c.post("/hooks/nasty", json={}, headers={**AUTH, "X-Request-Id": "nasty-1"})
    assert (r.status_code, r.json()) == (500, {"ok": False, "error": "hook mapping failed"})
    line = next(e for e in gw.flushed_log_events() if e.get("request_id") == "nasty-1" and e["event"] != "http.request")
    assert (line["event"], line["error_type"]) == ("hook.mapping_failed", "RuntimeError"), line
    assert "payload text" not in str(line)


def test_a_result_larger_than_a_body_may_be_is_mapping_failed(gateway_factory: GatewayFactory,
                                                              tmp_path: Path) -> None:
    """A transform returning 100 MB held the event loop 14 s and wrote 400 MB to the store; its
    strings are now bounded as a body is (hooks.maxBodyBytes)."""
    cfg = _config(tmp_path, {"huge": HUGE}, action="agent")
    cfg["hooks"]["maxBodyBytes"] = 4096
    gw = gateway_factory(cfg)
    with gw.client() as c:
        assert c.post("/hooks/huge", json={"n": 4096}, headers=AUTH).status_code == 200
        r = c.post("/hooks/huge", json={"n": 4097}, headers={**AUTH, "X-Request-Id": "huge-1"})
    assert (r.status_code, r.json()) == (500, {"ok": False, "error": "hook mapping failed"})
    line = next(e for e in gw.flushed_log_events() if e.get("request_id") == "huge-1" and e["event"] != "http.request")
    assert line["error"] == "transform returned a message longer than hooks.maxBodyBytes (4096 characters)", line
    assert os.path.getsize(tmp_path / "hookgate.db") < 2_000_000


STRAY_ERRORS = """
import asyncio, threading

async def transform(ctx):
    async def boom():
        raise RuntimeError("SECRET-in-task " + ctx.payload["p"])
    def thread():
        raise ValueError("SECRET-in-thread")
    loop = asyncio.get_running_loop()
    loop.create_task(boom())
    loop.call_soon(lambda: 1 / 0)
    threading.Thread(target=thread).start()
    return {"text": "ok"}
"""


def test_errors_of_a_transforms_own_tasks_and_threads_are_json_lines(gateway_factory: GatewayFactory,
                                                                     tmp_path: Path) -> None:
    """operations.md §2: one JSON object per line, never an exception's message. A task, a callback and
    a thread of a transform's that raised printed asyncio's and threading's tracebacks, messages and all."""
    import json

    gw = gateway_factory(_config(tmp_path, {"stray": STRAY_ERRORS}))
    with gw.client() as c:
        assert c.post("/hooks/stray", json={"p": "payload"}, headers=AUTH).status_code == 200

    def seen() -> set[str]:
        return {e["event"] for e in gw.flushed_log_events()} & {"loop.unhandled", "thread.unhandled"}
    wait_for(lambda: seen() == {"loop.unhandled", "thread.unhandled"}, timeout=15)
    text = gw.stderr()
    for line in text.splitlines():
        json.loads(line)  # every line is JSON
    assert "SECRET" not in text and "payload" not in text
    lines = [e for e in gw.flushed_log_events() if e["event"] in ("loop.unhandled", "thread.unhandled")]
    assert {(e["event"], e.get("where"), e["error_type"]) for e in lines} == {
        ("loop.unhandled", "task", "RuntimeError"), ("loop.unhandled", "callback", "ZeroDivisionError"),
        ("thread.unhandled", None, "ValueError")}, lines


HUNG_IMPORT = """
import time
time.sleep(3600)

def transform(ctx):
    return {"text": "never"}
"""


def test_requests_behind_a_hung_import_share_it_not_a_thread_each(gateway_factory: GatewayFactory,
                                                                  tmp_path: Path) -> None:
    """Each request to a module whose import hangs started an import thread of its own, which then
    waited on the hung one's lock for good: 5 → 505 threads after 500 requests, until the process
    could start no thread (a reload, a command run) and the pid limit stopped every fork."""
    import httpx

    gw = gateway_factory(_config(tmp_path, {"hung": HUNG_IMPORT}))
    assert gw.proc is not None
    tasks = Path(f"/proc/{gw.proc.pid}/task")
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "warm"}, headers=AUTH).status_code == 200
    before = len(list(tasks.iterdir()))
    for _ in range(15):
        with httpx.Client(base_url=gw.url, timeout=0.3) as c:
            try:
                c.post("/hooks/hung", json={}, headers=AUTH)
            except httpx.TimeoutException:
                pass  # the request waits on (its timeout + 30 s); the client does not
    assert len(list(tasks.iterdir())) <= before + 2  # the one hung import (and at most one more)


LINGERING_THREAD = """
import threading, time

async def transform(ctx):  # on the event loop's thread: what it starts is no daemon
    threading.Thread(target=time.sleep, args=(3600,)).start()
    return {"text": "started"}
"""


def test_a_thread_a_transform_left_running_does_not_keep_the_process(gateway_factory: GatewayFactory,
                                                                     tmp_path: Path) -> None:
    """The interpreter's exit waits for every thread that is not a daemon: after shutdown.completed
    the process lived on for good, and a second SIGTERM was not answered (its loop was gone)."""
    gw = gateway_factory(_config(tmp_path, {"lingering": LINGERING_THREAD}))
    with gw.client() as c:
        assert c.post("/hooks/lingering", json={}, headers=AUTH).status_code == 200
    assert gw.stop(signal.SIGTERM, timeout=15) == 0
    left = [e for e in gw.log_events() if e["event"] == "shutdown.threads_left"]
    assert [e["count"] for e in left] == [1], left


def test_a_gateway_whose_threads_all_end_says_nothing_of_threads_left(gateway_factory: GatewayFactory,
                                                                       tmp_path: Path) -> None:
    gw = gateway_factory(_config(tmp_path, {"quick": QUICK}))
    with gw.client() as c:
        assert c.post("/hooks/quick", json={}, headers=AUTH).status_code == 200
        assert c.get("/metrics").status_code == 200
    assert gw.stop(signal.SIGTERM, timeout=15) == 0
    assert not [e for e in gw.log_events() if e["event"] == "shutdown.threads_left"]


def test_a_module_fixed_after_its_import_hung_is_imported_anew(gateway_factory: GatewayFactory,
                                                               tmp_path: Path) -> None:
    """The requests after an import that hangs waited for that import, whatever the file became:
    fixing the file (and a SIGHUP) changed nothing until a restart."""
    import httpx

    gw = gateway_factory(_config(tmp_path, {"hung": HUNG_IMPORT}))
    with httpx.Client(base_url=gw.url, timeout=0.5) as c:
        try:
            c.post("/hooks/hung", json={}, headers=AUTH)
        except httpx.TimeoutException:
            pass  # it hangs, as the module does
    (tmp_path / "hooks" / "transforms" / "hung.py").write_text('def transform(ctx):\n    return {"text": "fixed"}\n')
    with gw.client() as c:
        assert c.post("/hooks/hung", json={}, headers=AUTH).status_code == 200


RAISING_DEL = """
class Leaky:
    def __del__(self):
        raise RuntimeError("payload text")

def transform(ctx):
    for _ in range(50):
        Leaky()
    return {"text": "ok"}
"""


def test_errors_nothing_handles_are_a_line_per_10_s_not_one_each(gateway_factory: GatewayFactory,
                                                                 tmp_path: Path) -> None:
    """A transform whose objects raise in __del__ on every request wrote 40 000 lines in 1.7 s."""
    gw = gateway_factory(_config(tmp_path, {"leaky": RAISING_DEL}))
    with gw.client() as c:
        for _ in range(3):
            assert c.post("/hooks/leaky", json={}, headers=AUTH).status_code == 200
    lines = [e for e in gw.flushed_log_events() if e["event"] == "python.unraisable"]
    assert [(e["error_type"], e["count"]) for e in lines] == [("RuntimeError", 1)], lines
    assert "payload text" not in gw.stderr()
