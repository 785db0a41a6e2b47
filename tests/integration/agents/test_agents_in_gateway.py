"""The HTTP runtimes inside a real `hookgate serve`: the worker builds them with its shared client,
which it creates on the first HTTP runtime (a gateway with only echo agents never loads httpx)."""

from __future__ import annotations

import sqlite3
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, hooks_config, wait_for


def run_row(gw: RunningGateway, run_id: str) -> dict[str, Any]:
    with sqlite3.connect(gw.workdir / "hookgate.db") as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT status, reply, error FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return dict(row) if row else {}


def post_agent(gw: RunningGateway, **body: Any) -> str:
    with gw.client() as c:
        r = c.post("/hooks/agent", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return str(r.json()["runId"])


def test_openai_and_anthropic_agents_answer_hook_runs_through_the_shared_client(
    gateway_factory: GatewayFactory, model_api: Any
) -> None:
    cfg = hooks_config(allowedAgentIds=["gpt", "claude"])
    cfg["agents"] = {"list": [
        {"id": "gpt", "default": True, "model": "openai/gpt-test",
         "runtime": {"kind": "openai", "baseUrl": f"{model_api.url}/v1", "apiKey": {"source": "env", "id": "HG_TEST_OPENAI_KEY"}}},
        {"id": "claude", "model": "anthropic/claude-test",
         "runtime": {"kind": "anthropic", "baseUrl": model_api.url, "apiKey": {"source": "env", "id": "HG_TEST_ANTHROPIC_KEY"}}},
    ]}
    cfg["channels"] = {"console": {}}
    gw = gateway_factory(cfg, env={"HG_TEST_OPENAI_KEY": "sk-openai-test", "HG_TEST_ANTHROPIC_KEY": "sk-ant-test"})
    first = post_agent(gw, message="deploy done", name="Deploy", agentId="gpt")
    second = post_agent(gw, message="tests green", name="CI", agentId="claude")
    done = [wait_for(lambda r=r: (row := run_row(gw, r)) and row["status"] in ("ok", "error") and row)
            for r in (first, second)]
    assert done[0]["status"] == "ok" and done[0]["reply"] == "hello from gpt-test", done[0]
    assert done[1]["status"] == "ok" and done[1]["reply"] == "hello from claude-test", done[1]
    paths = sorted(r.path for r in model_api.requests)
    assert paths == ["/v1/chat/completions", "/v1/messages"]
    auth = {r.path: r.headers for r in model_api.requests}
    assert auth["/v1/chat/completions"]["authorization"] == "Bearer sk-openai-test"
    assert auth["/v1/messages"]["x-api-key"] == "sk-ant-test"
    log = gw.stderr()
    assert "sk-openai-test" not in log and "sk-ant-test" not in log
