"""After a burst, a quiet second gives the store's page caches and the heap's free memory back to the
OS (`hookgate.server.Service._release_when_quiet`): the process returns near its idle size instead of
keeping its high-water mark until the next burst (issue #2: RSS back within 10 % of idle)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

from gateway import HOOKS_TOKEN, RunningGateway, wait_for


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _burst(port: int, clients: int, each: int) -> None:
    """``clients`` keep-alive connections sending ``each`` agent hooks (a session and a run row each)."""

    def send(client: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(each):
            body = json.dumps({"message": f"burst {client}-{i} " + "x" * 200, "name": f"Burst {client}"})
            conn.request("POST", "/hooks/agent", body,
                         {"Authorization": f"Bearer {HOOKS_TOKEN}", "Content-Type": "application/json"})
            response = conn.getresponse()
            assert response.status == 200, response.read()
            response.read()
        conn.close()

    threads = [threading.Thread(target=send, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_memory_goes_back_after_a_burst(gateway: RunningGateway) -> None:
    assert gateway.proc is not None
    pid = gateway.proc.pid
    time.sleep(1.5)  # past the first quiet second after the start
    idle = _rss_mib(pid)
    _burst(gateway.port, 8, 400)  # 3 200 runs: their rows fill the write connection's page cache
    busy = _rss_mib(pid)

    def settled() -> bool:
        return all(not json.loads(gateway.cli("runs", "list", "--json", "--status", status, check=True).stdout)
                   for status in ("queued", "running"))

    wait_for(settled, timeout=60)  # the worker has executed every run
    # a quiet second after the last write, the caches are released
    after = wait_for(lambda: (rss := _rss_mib(pid)) < busy - 1.0 and rss, timeout=15)
    assert after < idle * 1.10, (idle, busy, after)
