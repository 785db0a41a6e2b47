"""docs/mappings.md: every `<!-- file: … -->` snippet is written out and exercised with
`hookgate hooks test`, `hookgate config check` and a real server."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from clirun import hookgate

DOC = Path(__file__).resolve().parents[2] / "docs" / "mappings.md"
SNIPPET = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.DOTALL)
ENV = {"HOOKS_TOKEN": "doc-secret"}


def write_snippets(tmp: Path) -> dict[str, str]:
    files = dict(SNIPPET.findall(DOC.read_text()))
    assert set(files) >= {"hookgate.json5", "hooks/transforms/github.py", "github-pr.json", "gmail.json",
                          "alert.json"}
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    return files


def hooks_test(cwd: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = hookgate(cwd, "hooks", "test", *args, env=ENV)
    return r.returncode, json.loads(r.stdout)


def test_doc_examples_with_hooks_test(tmp_path: Path) -> None:
    write_snippets(tmp_path)
    check = hookgate(tmp_path, "config", "check", env=ENV)
    assert check.returncode == 0, check.stderr
    code, out = hooks_test(tmp_path, "github", "--payload", "github-pr.json",
                           "--header", "X-GitHub-Event: pull_request")
    assert code == 0
    a = out["action"]
    assert out["mapping"] == "github" and a["agentId"] == "ops" and a["name"] == "GitHub PR #42"
    assert a["message"] == "octocat opened PR #42 on octo/repo: Fix the flux capacitor"
    assert a["storedSessionKey"] == "agent:ops:hook:github:octo/repo"
    assert hooks_test(tmp_path, "github", "--payload", "github-pr.json", "--header", "X-GitHub-Event: ping") == (
        0, {"status": 204, "mapping": "github", "skipped": True})
    code, out = hooks_test(tmp_path, "gmail", "--payload", "gmail.json", "--prompt")
    assert code == 0 and out["action"]["sessionKey"] == "hook:gmail:18c2f0a1"
    assert out["action"]["externalContentSource"] == "gmail"
    assert "Source: Email" in out["prompt"] and "00000000-0000-0000-0000-000000000000" in out["prompt"]
    code, out = hooks_test(tmp_path, "alerts", "--payload", "alert.json")
    assert code == 0 and out["action"]["text"].startswith("[critical] DiskFull on db-1: /var is 97% full (at 20")
    code, out = hooks_test(tmp_path, "nope", "--payload", "alert.json")
    assert (code, out) == (1, {"status": 404, "mapping": None, "error": "Not Found"})


def test_config_check_reports_transform_import_errors(tmp_path: Path) -> None:
    write_snippets(tmp_path)
    (tmp_path / "hooks/transforms/github.py").write_text("import not_a_real_module_xyz\n")
    r = hookgate(tmp_path, "config", "check", env=ENV)
    assert r.returncode == 2
    assert ("error: hooks.mappings[0].transform.module: ModuleNotFoundError: No module named "
            "'not_a_real_module_xyz'") in r.stderr.splitlines()
    # also next to an unrelated error elsewhere: every error in one pass (they waited for a clean load)
    config = tmp_path / "hookgate.json5"
    config.write_text(config.read_text().replace("{", '{gateway: {port: "x"},', 1))
    r = hookgate(tmp_path, "config", "check", env=ENV)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: gateway.port: expected integer, got string",
        "error: hooks.mappings[0].transform.module: ModuleNotFoundError: No module named 'not_a_real_module_xyz'",
    ]


def test_doc_examples_on_a_real_server(tmp_path: Path) -> None:
    write_snippets(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKGATE_")}
    proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "serve", "--port", "0", "--no-worker",
                             "--log-format", "json"], cwd=tmp_path, env={**env, **ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        port = None
        deadline = time.monotonic() + 15
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if " listening on " in line:
                port = int(line.rsplit(":", 1)[1])
        assert port is not None
        auth = {"X-Hookgate-Token": "doc-secret"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            pr = json.loads((tmp_path / "github-pr.json").read_text())
            assert c.post("/hooks/github", json=pr, headers={**auth, "X-GitHub-Event": "ping"}).status_code == 204
            r = c.post("/hooks/github", json=pr, headers={**auth, "X-GitHub-Event": "pull_request"})
            assert r.status_code == 200
            gmail = json.loads((tmp_path / "gmail.json").read_text())
            assert c.post("/hooks/gmail", json=gmail, headers=auth).status_code == 200
            alert = json.loads((tmp_path / "alert.json").read_text())
            assert c.post("/hooks/alerts", json=alert, headers=auth).json() == {
                "ok": True, "mode": "now", "eventOutcome": "queued"}
        with sqlite3.connect(tmp_path / "hookgate.db") as conn:
            keys = sorted(k for (k,) in conn.execute("SELECT session_key FROM runs WHERE kind = 'hook'"))
            texts = [t for (t,) in conn.execute("SELECT text FROM system_events")]
        assert keys == ["agent:main:hook:gmail:18c2f0a1", "agent:ops:hook:github:octo/repo"]
        assert len(texts) == 1 and texts[0].startswith("[critical] DiskFull on db-1")
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()
