"""Worker figures (issue #4): accept → `ok` latency of echo runs, and a 1 000-run burst draining.

Run by `bench/run.py` (suite `runs`) or alone: python bench/runs.py
"""

from __future__ import annotations

import concurrent.futures
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from run import TOKEN, Gateway

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def wait_terminal(db: Path, expected: int, timeout: float = 120.0) -> float:
    start = time.monotonic()
    with sqlite3.connect(db) as conn:
        while time.monotonic() - start < timeout:
            done = conn.execute("SELECT count(*) FROM runs WHERE kind = 'hook' AND status NOT IN ('queued', 'running')"
                                ).fetchone()[0]
            if done >= expected:
                return time.monotonic() - start
            time.sleep(0.02)
    raise RuntimeError("runs did not drain")


def runs_suite(work: Path, durability: str = "full") -> list[str]:
    lines: list[str] = []
    db = work / "runs.db"
    with Gateway(work, db, durability) as gw, httpx.Client(base_url=gw.base, headers=HEADERS) as client:
        # 1. latency: one run at a time, accept → ok (server timestamps: created_at → ended_at)
        for i in range(1000):
            r = client.post("/hooks/agent", json={"message": f"latency {i}", "deliver": False})
            assert r.status_code == 200
            wait_terminal(db, i + 1)
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT ended_at - created_at, ended_at - started_at, status FROM runs "
                                "WHERE kind = 'hook'").fetchall()
        total = [float(r[0]) for r in rows]
        runtime = [float(r[1]) for r in rows]
        assert all(r[2] == "ok" for r in rows)
        lines.append(f"runs: accept → ok over {len(rows)} echo runs: p50 {statistics.median(total):.1f} ms, "
                     f"p99 {pct(total, 0.99):.1f} ms (of which claim → end p50 {statistics.median(runtime):.1f} ms)")
        # 2. burst: 1 000 accepted agent hooks, then drain with maxConcurrentRuns 4. The worker runs
        # them while the burst is still being accepted, so the drain is timed from the first POST to
        # the last run's end, by the server's own clock (created_at / ended_at, in ms).
        with sqlite3.connect(db) as conn:
            before = conn.execute("SELECT coalesce(max(rowid), 0) FROM runs").fetchone()[0]
        t0 = time.monotonic()

        def post(i: int) -> int:
            return client.post("/hooks/agent", json={"message": f"burst {i}", "deliver": False}).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(post, range(1000)))
        accepted = time.monotonic() - t0
        tail = wait_terminal(db, 2000)
        with sqlite3.connect(db) as conn:
            first, last, bad = conn.execute(
                "SELECT min(created_at), max(ended_at), sum(status != 'ok') FROM runs WHERE kind = 'hook' AND rowid > ?",
                (before,)).fetchone()
        drained = (last - first) / 1000
        lines.append(f"runs: burst of 1000 agent hooks accepted in {accepted:.2f} s "
                     f"({statuses.count(200)} × 200); the last run ended {drained:.2f} s after the first was "
                     f"accepted ({tail:.2f} s after the last POST answered) → {1000 / drained:.0f} runs/s with "
                     f"4 concurrent; runs not ok: {bad}")
    return lines


if __name__ == "__main__":
    for line in runs_suite(Path(tempfile.mkdtemp(prefix="hookgate-runs-"))):
        print(line)
