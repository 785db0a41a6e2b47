"""Where a valid wake's CPU goes: the same `hookgate serve` three ways, each under wrk -t2 -c32.

- ``full``: the real gateway (the `POST /hooks/wake` row of `make bench`);
- ``no-sql``: the writer's groups, BEGIN/COMMIT, fsync and futures as usual, but the wake's SQL is
  not run (``queue_event_sync`` answers ``queued`` without a statement);
- ``no-store``: the store is not called at all (``queue_system_event`` answers at once).

For each it prints requests/s and, per thread, user and system CPU per request: the event loop's
thread is what bounds throughput (one interpreter does the request path and the operations' SQL;
see the module docstring of ``hookgate.store.sqlite.writer``). A diagnostic, not a figure of hookgate:
the two stubbed variants answer 200 without storing anything.

    .venv/bin/python bench/layers.py [--duration 10] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import PY, TOKEN, free_port, gateway_config, lua, wait_http

VARIANTS = ("full", "no-sql", "no-store")


def _patch(variant: str) -> None:
    """Stub the store for a diagnostic run of ``serve`` (this process only)."""
    from hookgate.store.base import WakeResult
    from hookgate.store.sqlite.backend import SqliteStore

    if variant == "no-sql":
        def queue_event_sync(self: SqliteStore, conn: object, *args: object) -> WakeResult:
            return WakeResult("queued", 0)

        SqliteStore.queue_event_sync = queue_event_sync  # type: ignore[assignment,method-assign]
    elif variant == "no-store":
        async def queue_system_event(self: SqliteStore, **kwargs: object) -> WakeResult:
            return WakeResult("queued", 0)

        SqliteStore.queue_system_event = queue_system_event  # type: ignore[assignment,method-assign]


def _threads(pid: int) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds so far: the event loop's thread (the main one) and all others."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"loop thread": (0.0, 0.0), "other threads": (0.0, 0.0)}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        name = "loop thread" if task.name == str(pid) else "other threads"
        user, system = out[name]
        out[name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return out


def measure(variant: str, work: Path, args: argparse.Namespace) -> str:
    db = work / f"{variant}.db"
    cfg = gateway_config(work, db, "full")
    port = free_port()
    cmd = [PY, str(Path(__file__).resolve()), "--variant", variant, "serve", "--config", str(cfg),
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/readyz")
        script = lua(work / "wake.lua", "POST", "/hooks/wake",
                     {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                     "'{\"text\":\"bench ' .. tid .. '-' .. counter .. '\",\"mode\":\"now\"}'")
        wrk = ["wrk", f"-t{args.threads}", f"-c{args.connections}", "-s", str(script), url]
        subprocess.run([*wrk[:3], "-d2s", *wrk[3:]], capture_output=True, check=True)  # warm-up
        before = _threads(proc.pid)
        out = subprocess.run([*wrk[:3], f"-d{args.duration}s", *wrk[3:]], capture_output=True, text=True,
                             check=True).stdout
        after = _threads(proc.pid)
        requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
        parts = []
        for name, (user, system) in after.items():
            u0, s0 = before[name]
            parts.append(f"{name}: user {(user - u0) / requests * 1e6:.1f} + sys {(system - s0) / requests * 1e6:.1f} us")
        busy = (sum(after["loop thread"]) - sum(before["loop thread"])) / args.duration
        return f"{variant:9} {rps:7.0f} req/s  loop thread {busy * 100:3.0f} % busy  " + "; ".join(parts)
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--variant":  # the server side of one variant
        _patch(sys.argv[2])
        from hookgate.cli import main as cli_main

        return cli_main(sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, POST /hooks/wake (mode now), "
          "durability full; CPU per request by thread")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for variant in VARIANTS:
                print(measure(variant, Path(tmp), args), flush=True)
                time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
