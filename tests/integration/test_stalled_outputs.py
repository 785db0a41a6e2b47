"""A gateway whose stderr (the log) or stdout (the console channel) nobody reads, or that started with
either closed, serves as before: the requests, ``/healthz`` and the stop signal do not wait for a
reader (``hookgate serve 2>&1 | less`` left paused; a log shipper that stalls; ``>&-`` in a unit file)."""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from gateway import AUTH, hooks_config, wait_for

F_SETPIPE_SZ = 1031


def _config(tmp_path: Path) -> Path:
    cfg = hooks_config()
    cfg["channels"] = {"console": {}}
    path = tmp_path / "hookgate.json5"
    path.write_text(json.dumps(cfg))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_cmd(config: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "hookgate.cli", "serve", "--config", str(config), "--port", str(port),
            "--log-format", "json"]


def _shrink(pipe: Any) -> None:
    fcntl.fcntl(pipe.fileno(), F_SETPIPE_SZ, 4096)  # full after a dozen log lines


@contextmanager
def _unread_pipes(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A serve whose stdout and stderr are pipes of 4 KiB: stdout read up to the listening line, then
    neither ever again (until the end, to see what was written)."""
    port = _free_port()
    proc = subprocess.Popen(_serve_cmd(_config(tmp_path), port), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        _shrink(proc.stdout)
        _shrink(proc.stderr)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        seen = b""
        deadline = time.monotonic() + 15
        while b" listening on " not in seen and time.monotonic() < deadline:
            if sel.select(0.2):
                seen += os.read(proc.stdout.fileno(), 4096)
        assert b" listening on " in seen, seen
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_log_and_a_console_nobody_reads_do_not_stop_the_gateway(tmp_path: Path) -> None:
    with _unread_pipes(tmp_path) as (proc, url), httpx.Client(base_url=url, timeout=10) as c:
        # ~350 bytes of log a refusal: 600 of them fill the 4 KiB pipe fifty times over
        statuses = [c.post("/hooks/wake", json={"text": "x"}, headers={"Authorization": "Bearer wrong"}).status_code
                    for _ in range(600)]
        assert set(statuses) == {401, 429}, set(statuses)
        # each reply is an 8 KiB console line: the second already cannot be written
        runs = []
        for i in range(6):
            r = c.post("/hooks/agent", json={"message": f"{i} " + "m" * 8000, "channel": "console", "to": "you"},
                       headers=AUTH)
            assert r.status_code == 200, r.text
            runs.append(r.json()["runId"])
        def ended() -> bool:
            listed = subprocess.run([sys.executable, "-m", "hookgate.cli", "--config", str(tmp_path / "hookgate.json5"),
                                     "runs", "list", "--json"], cwd=tmp_path, capture_output=True, check=True).stdout
            return sum(1 for run in json.loads(listed) if run["runId"] in runs and run["status"] == "ok") == 6
        wait_for(ended, timeout=20)  # their console deliveries now wait on the pipe
        for _ in range(200):
            assert c.post("/hooks/wake", json={"text": "still here"}, headers=AUTH).status_code == 200
        assert c.get("/healthz").status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)  # the pipes read at last: what waited on them is written
        assert proc.returncode == 0
    log = [json.loads(line) for line in err.splitlines()]
    # what waited for the reader was written once the pipe was read: in order, none dropped
    assert [e["event"] for e in log if e["event"] in ("shutdown.started", "shutdown.completed")] == \
        ["shutdown.started", "shutdown.completed"]
    assert not [e for e in log if e["event"] == "log.dropped"]
    assert out.count(b'"channel":"console"') >= 1


def test_the_stop_signal_ends_the_gateway_while_the_log_reader_is_stalled(tmp_path: Path) -> None:
    # it did not: the event loop waited in write(2), and a second SIGTERM's handler ran on that loop
    with _unread_pipes(tmp_path) as (proc, url), httpx.Client(base_url=url, timeout=10) as c:
        for _ in range(300):
            c.post("/hooks/wake", json={"text": "x"}, headers={"Authorization": "Bearer wrong"})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0  # the lines still waiting on the reader are lost with the process


def _serve_with(tmp_path: Path, redirect: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = " ".join(f"'{a}'" for a in _serve_cmd(_config(tmp_path), port))
    proc = subprocess.Popen(["sh", "-c", f"exec {cmd} {redirect}"], cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None  # exited: stop waiting, the assertion below says so
    wait_for(ready, timeout=15)
    assert proc.poll() is None, f"serve {redirect} exited {proc.returncode}"
    return proc, url


def test_serve_with_stdout_or_stderr_closed_or_full_serves(tmp_path: Path) -> None:
    # `>&-` crashed on the ready lines (AttributeError), `>/dev/full` too (ENOSPC), `2>&-` exited 1
    # with no word (it now writes to the /dev/null put there); a console delivery to a closed stdout
    # fails (dead) instead of crashing the job
    for n, redirect in enumerate((">&-", ">/dev/full", "2>&-", ">&- 2>&-", "2>/dev/full")):
        workdir = tmp_path / str(n)
        workdir.mkdir()
        proc, url = _serve_with(workdir, redirect)
        try:
            with httpx.Client(base_url=url, timeout=10) as c:
                assert c.post("/hooks/wake", json={"text": "x"}, headers=AUTH).status_code == 200
                r = c.post("/hooks/agent", json={"message": "hi", "channel": "console", "to": "you"}, headers=AUTH)
                assert r.status_code == 200, r.text
                if redirect == "2>/dev/full":  # every line dropped, and counted (once flushed: within 100 ms)
                    def dropped() -> float:
                        return next(float(line.split()[1]) for line in c.get("/metrics").text.splitlines()
                                    if line.startswith("hookgate_log_lines_dropped_total "))
                    assert wait_for(lambda: dropped() >= 4), dropped()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, redirect
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_command_with_stderr_closed_still_does_its_work(tmp_path: Path) -> None:
    config = _config(tmp_path)
    r = subprocess.run(["sh", "-c", f"exec '{sys.executable}' -m hookgate.cli --config '{config}' config check 2>&-"],
                       cwd=tmp_path, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "config OK" in r.stdout, (r.returncode, r.stdout)
