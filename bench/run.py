"""`make bench`: wrk against a real hookgate and, in the same run, against the minimal ASGI ceiling.

Prints requests/s, p50, p99 and each requests/s as a ratio of the ceiling, plus the gateway's
start-to-ready time and RSS (idle, peak, after). Needs wrk (Debian package `wrk`).
Options: --duration 10 --threads 2 --connections 32 --only wake,agent,...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Self

HERE = Path(__file__).resolve().parent
TOKEN = "bench-hooks-token"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 10.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"{url} not ready after {timeout}s")


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except OSError:
                return
            time.sleep(0.1)

    def __enter__(self) -> Self:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


@dataclass
class Result:
    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    statuses: str
    errors: str = ""


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _latency(text: str, pct: str) -> float:
    m = re.search(rf"^\s*{pct}%\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def wrk(name: str, url: str, script: Path, args: argparse.Namespace) -> Result:
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
           "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    statuses = re.search(r"STATUSES (.*)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Result(name, rps, _latency(out, "50"), _latency(out, "99"),
                  statuses.group(1).strip() if statuses else "",
                  (errors.group(1) if errors else "") + (f" non2xx={non2xx.group(1)}" if non2xx else ""))




def lua(path: Path, method: str, url_path: str, headers: dict[str, str], body_expr: str | None) -> Path:
    hdr = "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in headers.items()) + "}"
    body = body_expr or '""'
    # a per-thread counter keeps every body distinct, so every request is a real insert
    text = f"""
local counter = 0
local tid = math.random(1, 1000000000)
local hdrs = {hdr}
request = function()
  counter = counter + 1
  return wrk.format("{method}", "{url_path}", hdrs, {body})
end
"""
    path.write_text(text)
    return path


def minimal_ceiling(args: argparse.Namespace, work: Path) -> Result:
    port = free_port()
    proc = subprocess.Popen([PY, str(HERE / "minimal_app.py"), str(port)], stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        script = lua(work / "min.lua", "POST", "/hooks/wake", {"Content-Type": "application/json"},
                     "'{\"text\":\"bench ' .. tid .. '-' .. counter .. '\"}'")
        return wrk("minimal ASGI app (ceiling)", f"http://127.0.0.1:{port}", script, args)
    finally:
        proc.terminate()
        proc.wait()


def gateway_config(work: Path, durability: str) -> Path:
    cfg = {
        "storage": {"sqlite": {"path": str(work / "bench.db"), "durability": durability}},
        "hooks": {"enabled": True, "token": TOKEN},
        "channels": {"console": {}},
    }
    path = work / "hookgate.json5"
    path.write_text(json.dumps(cfg))
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--durability", default="full", choices=["full", "normal"])
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hookgate-bench-"))
    results: list[Result] = [minimal_ceiling(args, work)]
    ceiling = results[0].rps

    port = free_port()
    cfg = gateway_config(work, args.durability)
    t0 = time.monotonic()
    log = open(work / "gateway.log", "wb")  # noqa: SIM115 - closed after the gateway exits
    proc = subprocess.Popen([PY, "-m", "hookgate.cli", "serve", "--config", str(cfg), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/readyz")
        ready_s = time.monotonic() - t0
        time.sleep(1.0)
        rss_idle = rss_mib(proc.pid)
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        scenarios = [
            ("POST /hooks/wake (valid)", lua(work / "wake.lua", "POST", "/hooks/wake", auth,
                                             "'{\"text\":\"bench ' .. tid .. '-' .. counter .. '\",\"mode\":\"now\"}'")),
            ("POST /hooks/wake (wrong token, locked out)",
             lua(work / "wrong.lua", "POST", "/hooks/wake", {"Authorization": "Bearer wrong"}, "'{\"text\":\"x\"}'")),
            ("POST /hooks/agent (valid)", lua(work / "agent.lua", "POST", "/hooks/agent", auth,
                                              "'{\"message\":\"bench ' .. tid .. '-' .. counter .. '\"}'")),
        ]
        with RssSampler(proc.pid) as sampler:
            for name, script in scenarios:
                results.append(wrk(name, base, script, args))
        time.sleep(2.0)
        rss_after = rss_mib(proc.pid)
        rss_peak = max(sampler.peak, rss_mib(proc.pid, "VmHWM"))
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()

    print(f"\nhookgate bench — wrk -t{args.threads} -c{args.connections} -d{args.duration}s, "
          f"durability {args.durability}, {os.cpu_count()} cores\n")
    print(f"{'scenario':44} {'req/s':>9} {'ratio':>6} {'p50 ms':>8} {'p99 ms':>8}  notes")
    for r in results:
        print(f"{r.name:44} {r.rps:9.0f} {r.rps / ceiling:6.2f} {r.p50_ms:8.2f} {r.p99_ms:8.2f}  {r.errors}")
    print(f"\nstart to ready: {ready_s * 1000:.0f} ms")
    print(f"RSS: idle {rss_idle:.1f} MiB, peak {rss_peak:.1f} MiB, after {rss_after:.1f} MiB "
          f"({(rss_after / rss_idle - 1) * 100:+.1f} % vs idle)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "results": [r.__dict__ for r in results], "ready_s": ready_s,
            "rss": {"idle": rss_idle, "peak": rss_peak, "after": rss_after}}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
