"""`hookgate serve` as PID 1 (a container started without --init): orphans are reaped, signals reach
the gateway, and the exit status is the gateway's. Run in a PID namespace of its own (unshare)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from gateway import AUTH, hooks_config, wait_for

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                                reason="a PID namespace needs unshare(1) and root")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_as_pid_1_orphans_are_reaped_and_sigterm_drains(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\n(sleep 0.2 >/dev/null 2>&1 &)\necho started\n")
    script.chmod(0o755)
    cfg = hooks_config()
    cfg["agents"] = {"defaults": {"runtime": {"kind": "command", "command": [str(script)]}},
                     "list": [{"id": "main", "default": True}]}
    config = tmp_path / "hookgate.json5"
    config.write_text(json.dumps(cfg))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outer = subprocess.Popen(["unshare", "-pf", "--mount-proc", sys.executable, "-m", "hookgate.cli", "serve",
                              "--config", str(config), "--port", str(port)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    init = wait_for(lambda: (kids := _children(outer.pid)) and kids[0])  # PID 1 of the namespace
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(url + "/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(ready, timeout=15)
        with httpx.Client(base_url=url, timeout=10) as c:
            runs = [c.post("/hooks/agent", json={"message": f"m{i}", "deliver": False}, headers=AUTH).json()["runId"]
                    for i in range(5)]
        db = tmp_path / "hookgate.db"

        def all_ok() -> bool:
            listed = subprocess.run([sys.executable, "-m", "hookgate.cli", "--config", str(config), "runs", "list",
                                     "--json"], capture_output=True, check=True, cwd=tmp_path).stdout
            return sum(r["status"] == "ok" for r in json.loads(listed) if r["runId"] in runs) == 5
        wait_for(all_ok, timeout=20)
        time.sleep(1.5)  # the background sleeps (orphans, re-parented to PID 1) have long ended

        def zombies() -> list[int]:
            out = []
            for pid in [init, *_children(init)]:
                out += [k for k in _children(pid) if _state(k) == "Z"]
            return out
        assert wait_for(lambda: not zombies(), timeout=5), zombies()
        os.kill(init, signal.SIGTERM)  # as `docker stop` does
        assert outer.wait(timeout=20) == 0
        assert db.exists()
    finally:
        if outer.poll() is None:
            os.kill(init, signal.SIGKILL)  # the namespace's init: everything in it goes with it
            outer.wait(timeout=10)
