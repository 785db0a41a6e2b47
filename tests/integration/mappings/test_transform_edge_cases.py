"""hooks.md §6.5 and §7.2 edge cases on a real server: a transform's model, a transform's own
CancelledError, and the run name in the wrapper's Task line."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, wait_for

TRANSFORM = """
import asyncio

def transform(ctx):
    return ctx.payload.get("ret")

async def cancelled(ctx):
    async def forever():
        await asyncio.sleep(60)
    task = asyncio.ensure_future(forever())
    await asyncio.sleep(0)
    task.cancel()
    await task          # raises asyncio.CancelledError inside the transform
    return None
"""


def config(tmp: Path) -> dict[str, Any]:
    d = tmp / "hooks" / "transforms"
    d.mkdir(parents=True, exist_ok=True)
    (d / "t.py").write_text(TRANSFORM)
    return hooks_config(
        mappings=[
            {"id": "t", "match": {"path": "t"}, "messageTemplate": "base", "transform": {"module": "t.py"}},
            {"id": "c", "match": {"path": "c"}, "messageTemplate": "base",
             "transform": {"module": "t.py", "export": "cancelled"}},
            {"id": "n", "match": {"path": "n"}, "name": "Build <s> report [INST]", "messageTemplate": "hello"},
        ])


def exact(resp: Any, status: int, body: str) -> None:
    assert (resp.status_code, resp.content) == (status, body.encode()), (resp.status_code, resp.text)


def test_transform_model_is_normalised_like_request_model(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """§6.5: merged agent fields are "normalised exactly like the §5.1 request fields"; §5.1 `model`:
    "if the key is present it must be a string that is non-empty after trimming" → 400 `model required`."""
    gw = gateway_factory(config(tmp_path))
    with gw.client() as c:
        for model in ("  ", "", 5):
            r = c.post("/hooks/t", json={"ret": {"model": model}}, headers=AUTH)
            exact(r, 400, '{"ok":false,"error":"model required"}')


def test_async_transform_raising_cancelled_error_is_mapping_failed(gateway_factory: GatewayFactory,
                                                                    tmp_path: Path) -> None:
    """§6.5: "an exception → 500 {"ok":false,"error":"hook mapping failed"}"."""
    gw = gateway_factory(config(tmp_path))
    with gw.client() as c:
        r = c.post("/hooks/c", json={}, headers=AUTH)
        exact(r, 500, '{"ok":false,"error":"hook mapping failed"}')


def db(gw: RunningGateway) -> sqlite3.Connection:
    return sqlite3.connect(gw.workdir / "hookgate.db")


def test_wrapper_task_line_name_is_only_system_tag_sanitised(gateway_factory: GatewayFactory,
                                                             tmp_path: Path) -> None:
    """§7.2: "`<name>` is the run name after system-tag sanitising (model.md §4.2)"; §7.4 (special
    tokens) is "Applied to the content"."""
    gw = gateway_factory(config(tmp_path))
    with gw.client() as c:
        r = c.post("/hooks/n", json={}, headers=AUTH)
    assert r.status_code == 200, r.text
    run_id = r.json()["runId"]

    def prompt() -> str | None:
        with db(gw) as conn:
            row = conn.execute("SELECT text FROM transcript_messages WHERE role = 'user'").fetchone()
        return row[0] if row else None

    text = wait_for(prompt)
    assert text.startswith(f"Task: Build <s> report [INST] | Job ID: {run_id} | Received: "), text[:120]
