"""A real ``hookgate serve`` subprocess on 127.0.0.1 with a real SQLite file, for integration tests."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

HOOKS_TOKEN = "hook-secret"
AUTH = {"Authorization": f"Bearer {HOOKS_TOKEN}"}


class RunningGateway:
    def __init__(self, workdir: Path, config: dict[str, Any] | str, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.config_path = workdir / "hookgate.json5"
        text = config if isinstance(config, str) else json.dumps(config, indent=2)
        self.config_path.write_text(text)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stdout_lines: list[str] = []
        self.stderr_path = workdir / "stderr.log"
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, *extra: str, timeout: float = 15.0, port: int = 0) -> RunningGateway:
        cmd = [sys.executable, "-m", "hookgate.cli", "serve", "--config", str(self.config_path),
               "--port", str(port or self.port), "--log-format", "json", *extra]
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.env, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        deadline = time.monotonic() + timeout
        buf = b""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hookgate exited {self.proc.returncode}: {self.stderr()[-2000:]}")
            sel.select(0.05)
            chunk = self.proc.stdout.read() or b""
            buf += chunk
            if b"store: " in buf:
                break
        sel.close()
        self.stdout_lines = buf.decode().splitlines()
        first = next((line for line in self.stdout_lines if " listening on " in line), None)
        if first is None:
            self.stop()
            raise RuntimeError(f"hookgate did not start: {buf!r} {self.stderr()[-2000:]}")
        self.port = int(first.rsplit(":", 1)[1])
        return self

    def read_stdout(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        data = self.proc.stdout.read() or b""
        self.stdout_lines.extend(data.decode().splitlines())
        return "\n".join(self.stdout_lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr.close()
        self.proc = None
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.stop()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, source: str | None = None) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=source) if source else None
        return httpx.Client(base_url=self.url, transport=transport, timeout=10.0)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text()
        except FileNotFoundError:
            return ""

    def log_events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hookgate.cli", "--config", str(self.config_path), *args],
            cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=60, check=check,
        )

    def flushed_log_events(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Every log line written so far: a marker request's access line is awaited first. Lines leave
        the server's buffer in order, so once the marker's is there every earlier line is too."""
        marker = f"flush-{time.monotonic_ns()}"
        with httpx.Client(base_url=self.url, timeout=10) as c:
            c.get("/healthz", headers={"X-Request-Id": marker})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.log_events()
            if any(e.get("request_id") == marker and e.get("event") == "http.request" for e in events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"the marker request's access line was not logged; log: {self.stderr()[-3000:]}")

    def wait_log(self, event: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.log_events():
                if entry.get("event") == event:
                    return entry
            time.sleep(0.05)
        raise AssertionError(f"log event {event!r} not seen; log: {self.stderr()[-3000:]}")


def split_response(data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """A raw response → (status line, headers by lower-case name, everything after the head)."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


def raw_request(port: int, data: bytes, *, source: str = "127.0.0.1", read_timeout: float = 10.0,
                send_delay: float | None = None, rest: bytes = b"") -> tuple[bytes, bool]:
    """Send raw bytes; return (everything received, whether the server closed the connection)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=read_timeout, source_address=(source, 0))
    try:
        sock.sendall(data)
        if send_delay is not None:
            time.sleep(send_delay)
            try:
                sock.sendall(rest)
            except OSError:
                pass
        received = b""
        closed = False
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
        return received, closed
    finally:
        sock.close()


def iter_lines(text: str) -> Iterator[str]:
    yield from (line for line in text.splitlines() if line.strip())


def wait_for(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``check`` until it returns something truthy (which is returned)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def hooks_config(**hooks: Any) -> dict[str, Any]:
    """Config ``H`` of hooks.md §9: hooks enabled with token ``hook-secret``, agents main and hooks."""
    cfg: dict[str, Any] = {
        "storage": {"sqlite": {"path": "hookgate.db"}},
        "agents": {"list": [{"id": "main", "default": True}, {"id": "hooks"}]},
        "hooks": {"enabled": True, "token": HOOKS_TOKEN, **hooks},
    }
    return cfg


GatewayFactory = Callable[..., RunningGateway]
