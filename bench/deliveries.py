"""Delivery figures (issue #6): deliveries/s to a loopback `webhook` channel, and POST → arrival.

1. Throughput: 2 000 agent hooks with `deliver: true` to the `webhook` channel, spread over 32 targets
   (deliveries to one target go one at a time, so this is the parallel case) and then 300 to a single
   target (the strictly ordered case). The figure is deliveries/s between the first delivery row's
   creation and the last one delivered (server timestamps). Baseline in the same run: httpx posting
   the same JSON to the same receiver from this process with 16 at a time (what the receiver and
   loopback allow at best).
2. End to end: POST /hooks/agent (echo runtime, `deliver: true`, embedded worker) → the message
   arriving at the receiver, one request at a time, p50/p99 over 300 requests.

Run by `bench/run.py` (suite `deliveries`) or alone: python bench/deliveries.py
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from run import TOKEN, Gateway
from runs import pct

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


class Receiver:
    """A loopback HTTP server that notes when each delivery (by runId) arrived."""

    def __init__(self) -> None:
        arrivals = self.arrivals = {}  # type: dict[str, float]
        self.count = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                now = time.monotonic()
                run_id = json.loads(body).get("runId")
                if run_id:
                    arrivals[run_id] = now
                outer.count += 1
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/in"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_delivered(db: Path, expected: int, timeout: float = 300.0) -> None:
    start = time.monotonic()
    with sqlite3.connect(db) as conn:
        while time.monotonic() - start < timeout:
            if conn.execute("SELECT count(*) FROM deliveries WHERE status = 'delivered'").fetchone()[0] >= expected:
                return
            time.sleep(0.02)
    raise RuntimeError("deliveries did not drain")


def window(db: Path, offset: int) -> tuple[int, float]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT created_at, delivered_at, status FROM deliveries ORDER BY seq LIMIT -1 OFFSET ?",
                            (offset,)).fetchall()
    dead = sum(1 for r in rows if r[2] != "delivered")
    span = (max(r[1] for r in rows if r[1]) - min(r[0] for r in rows)) / 1000
    return dead, len(rows) / span


def baseline(url: str, n: int = 2000, concurrency: int = 16) -> float:
    async def go() -> float:
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient() as client:
            async def one(i: int) -> None:
                async with sem:
                    r = await client.post(url, json={"channel": "webhook", "to": f"t{i % 32}", "text": "x"})
                    r.raise_for_status()

            t0 = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(n)))
            return n / (time.monotonic() - t0)

    return asyncio.run(go())


def deliveries_suite(work: Path, durability: str = "full") -> list[str]:
    lines: list[str] = []
    receiver = Receiver()
    db = work / "deliveries.db"
    try:
        base = baseline(receiver.url)
        channels = {"webhook": {"url": receiver.url}}
        with Gateway(work, db, durability, channels=channels) as gw, \
                httpx.Client(base_url=gw.base, headers=HEADERS) as client:
            # 1a. many targets
            def post(i: int, to: str) -> int:
                return client.post("/hooks/agent", json={"message": f"d {i}", "channel": "webhook", "to": to}
                                   ).status_code

            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(lambda i: post(i, f"t{i % 32}"), range(2000)))
            assert statuses.count(200) == 2000
            wait_delivered(db, 2000)
            dead, rate = window(db, 0)
            lines.append(f"deliveries: 2000 to 32 targets: {rate:.0f} deliveries/s (not delivered: {dead}); "
                         f"baseline httpx → same receiver, 16 at a time: {base:.0f} req/s")
            # 1b. one target, strictly in order
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(lambda i: post(i, "one"), range(300)))
            wait_delivered(db, 2300)
            dead, rate = window(db, 2000)
            lines.append(f"deliveries: 300 to one target (one at a time, in order): {rate:.0f} deliveries/s "
                         f"(not delivered: {dead})")
            # 2. end to end, one at a time
            latencies: list[float] = []
            for i in range(300):
                t0 = time.monotonic()
                r = client.post("/hooks/agent", json={"message": f"e2e {i}", "channel": "webhook", "to": "e2e"})
                run_id = r.json()["runId"]
                while run_id not in receiver.arrivals:
                    time.sleep(0.0005)
                latencies.append((receiver.arrivals[run_id] - t0) * 1000)
            lines.append(f"deliveries: POST /hooks/agent → arrival at the receiver over {len(latencies)} requests: "
                         f"p50 {statistics.median(latencies):.1f} ms, p99 {pct(latencies, 0.99):.1f} ms")
    finally:
        receiver.close()
    return lines


if __name__ == "__main__":
    for line in deliveries_suite(Path(tempfile.mkdtemp(prefix="hookgate-deliveries-"))):
        print(line)
