"""Micro-benchmark: queue_system_event ops/s with concurrent callers on a real SQLite file.

    .venv/bin/python bench/store_bench.py [--callers 64] [--seconds 3] [--group-commit-ms 2]

Not a test. Prints one line per durability level, e.g. ``full: 23456 ops/s, 812 commits, mean group 28.9``.
Each caller writes to its own session (round-robin over 16 agents); every 4th op carries a wake reason.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from hookgate.obs.metrics import Metrics
from hookgate.store.sqlite import SqliteStore


async def run(durability: str, callers: int, seconds: float, group_commit_ms: float, directory: Path) -> None:
    store = SqliteStore(
        directory / f"bench-{durability}.db",
        durability=durability,
        group_commit_ms=group_commit_ms,
        metrics=Metrics(),
    )
    await store.open()
    count = 0
    stop_at = 0.0

    async def caller(i: int) -> None:
        nonlocal count
        agent = f"a{i % 16}"
        key = f"agent:{agent}:main:{i}"
        n = 0
        while time.perf_counter() < stop_at:
            n += 1
            await store.queue_system_event(
                session_key=key,
                agent_id=agent,
                text=f"event {n}",
                now_ms=1_790_000_000_000 + n,
                wake_reason="hook:wake" if n % 4 == 0 else None,
            )
            count += 1

    try:
        stop_at = time.perf_counter() + 0.3  # warm-up
        await asyncio.gather(*(caller(i) for i in range(callers)))
        count = 0
        commits_before = store.writer.commits
        started = time.perf_counter()
        stop_at = started + seconds
        await asyncio.gather(*(caller(i) for i in range(callers)))
        elapsed = time.perf_counter() - started
        commits = store.writer.commits - commits_before
    finally:
        await store.close()
    print(
        f"{durability}: {count / elapsed:.0f} ops/s, {commits} commits, "
        f"mean group {count / max(commits, 1):.1f} ({callers} callers, groupCommitMs {group_commit_ms})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--group-commit-ms", type=float, default=2.0)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to put the database (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for durability in ("full", "normal"):
            await run(durability, args.callers, args.seconds, args.group_commit_ms, Path(tmp))


if __name__ == "__main__":
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
