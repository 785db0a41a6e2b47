"""`make run`: the quick-start script starts the gateway and the curl commands it prints work as printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_quickstart_prints_working_curl_commands(tmp_path: Path) -> None:
    for sub in ("examples", "scripts"):
        (tmp_path / sub).mkdir()
    shutil.copy(REPO / "examples/quickstart.json5", tmp_path / "examples")
    shutil.copy(REPO / "scripts/quickstart.sh", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKGATE_")}
    env["HOOKGATE_PORT"] = str(port)
    proc = subprocess.Popen(["bash", "scripts/quickstart.sh"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("store: "):
                break
        out = "".join(lines)
        assert f"listening on http://127.0.0.1:{port}" in out, out
        secrets_file = tmp_path / "examples/.quickstart-secrets.json"
        assert oct(secrets_file.stat().st_mode & 0o777) == "0o600"
        token = json.loads(secrets_file.read_text())["hooksToken"]
        # the curl commands exactly as printed (with their line continuations)
        commands = re.findall(r"^  (curl .*?(?:\\\n.*?)*)$", out, re.MULTILINE)
        assert len(commands) >= 3
        wake, agent = commands[0], commands[1]
        assert token in wake
        r = subprocess.run(["bash", "-c", wake], capture_output=True, text=True, timeout=10, check=False)
        assert json.loads(r.stdout) == {"ok": True, "mode": "now", "eventOutcome": "queued"}
        r = subprocess.run(["bash", "-c", agent], capture_output=True, text=True, timeout=10, check=False)
        assert json.loads(r.stdout)["ok"] is True
        inspect = [line.strip() for line in out.splitlines() if line.strip().startswith(".venv/bin/hookgate")]
        r = subprocess.run(["bash", "-c", inspect[0]], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                           env=env, check=False)
        assert "agent:main:main" in r.stdout and "Deploy finished" in r.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == 0
