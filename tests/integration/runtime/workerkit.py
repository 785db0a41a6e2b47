"""What the worker tests share: the database read directly, an agent hook posted, a worker config."""

from __future__ import annotations

import sqlite3
from typing import Any

from gateway import AUTH, RunningGateway, hooks_config


def db(gw: RunningGateway) -> sqlite3.Connection:
    conn = sqlite3.connect(gw.workdir / "hookgate.db")
    conn.row_factory = sqlite3.Row
    return conn


def run_row(gw: RunningGateway, run_id: str) -> dict[str, Any]:
    with db(gw) as conn:
        row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return dict(row) if row else {}


def events(gw: RunningGateway) -> list[dict[str, Any]]:
    with db(gw) as conn:
        return [dict(r) for r in conn.execute("SELECT * FROM system_events ORDER BY seq")]


def post_agent(gw: RunningGateway, **body: Any) -> str:
    with gw.client() as c:
        r = c.post("/hooks/agent", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return str(r.json()["runId"])


def config(**extra: Any) -> dict[str, Any]:
    """Hooks on, the console channel, 1 s leases; ``extra`` merged into top-level sections."""
    cfg = hooks_config()
    cfg["channels"] = {"console": {}}
    cfg["storage"]["leaseSeconds"] = 1
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg
