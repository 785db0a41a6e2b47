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
from typing import Any, Self

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
    cpu_us: float = float("nan")  # the server process's CPU time (all threads) per request
    steal: float = float("nan")  # the share of the machine's CPU time the hypervisor took during the row


STEAL_WARN = 0.10  # a row the hypervisor took this share of the machine from is named in the notes


def cpu_ticks() -> tuple[int, int]:
    """(steal, all) ticks of every CPU so far (/proc/stat's first line): ``steal`` is the time the
    hypervisor gave other guests. On a shared host the VM's speed drifts by tens of percent within
    minutes; a row measured while the host took a large share is slower for reasons outside
    hookgate. Printed per row; ``steal`` is -1 where the kernel does not report it."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (fields[7] if len(fields) > 7 else -1), sum(fields)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all CPU time between two ``cpu_ticks`` the hypervisor took; NaN when unknown."""
    if before[0] < 0 or after[1] <= before[1]:
        return float("nan")
    return (after[0] - before[0]) / (after[1] - before[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _latency(text: str, pct: str) -> float:
    m = re.search(rf"^\s*{pct}%\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def wrk(name: str, url: str, script: Path, args: argparse.Namespace, pid: int) -> Result:
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
           "-s", str(script), url]
    cpu_before, ticks_before = cpu_seconds(pid), cpu_ticks()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pid) - cpu_before
    steal = steal_share(ticks_before, cpu_ticks())
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = re.search(r"(\d+) requests in", out)
    statuses = re.search(r"STATUSES (.*)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Result(name, rps, _latency(out, "50"), _latency(out, "99"),
                  statuses.group(1).strip() if statuses else "",
                  (errors.group(1) if errors else "") + (f" non2xx={non2xx.group(1)}" if non2xx else ""),
                  cpu / int(requests.group(1)) * 1e6 if requests else float("nan"), steal)




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


def minimal_ceiling(args: argparse.Namespace, work: Path, *, stock: bool = False, bare: bool = False) -> Result:
    """The minimal app on hookgate's stack (``stock``: on uvicorn's own httptools protocol; ``bare``: a
    bare httptools protocol, no uvicorn and no ASGI)."""
    port = free_port()
    extra = ["--stock"] if stock else ["--bare"] if bare else []
    proc = subprocess.Popen([PY, str(HERE / "minimal_app.py"), str(port), *extra], stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        script = lua(work / "min.lua", "POST", "/hooks/wake", {"Content-Type": "application/json"},
                     "'{\"text\":\"bench ' .. tid .. '-' .. counter .. '\"}'")
        return wrk("minimal ASGI app (ceiling)", f"http://127.0.0.1:{port}", script, args, proc.pid)
    finally:
        proc.terminate()
        proc.wait()


ROUTE = "/plugins/webhooks/bench"
ROUTE_SECRET = "bench-route-secret"
ROUTE_SESSION = "agent:main:main"
BIG_LIMITS = {"rateLimit": {"windowSeconds": 60, "maxRequests": 100_000_000}, "maxInFlight": 1024}


# issue #5: a mapped agent hook through templates, and one through a trivial synchronous transform
MAPPINGS = [
    {"id": "tpl", "match": {"path": "tpl"}, "action": "agent", "name": "Bench",
     "messageTemplate": "{{message}}"},
    {"id": "tx", "match": {"path": "tx"}, "action": "agent", "transform": {"module": "bench.py"}},
]
TRANSFORM = """def transform(ctx):
    return {"message": ctx.payload["message"], "name": "Bench"}
"""


def gateway_config(work: Path, db: Path, durability: str, channels: dict[str, Any] | None = None) -> Path:
    transforms = work / "hooks" / "transforms"
    transforms.mkdir(parents=True, exist_ok=True)
    (transforms / "bench.py").write_text(TRANSFORM)
    cfg = {
        "storage": {"sqlite": {"path": str(db), "durability": durability}},
        "hooks": {"enabled": True, "token": TOKEN, "mappings": MAPPINGS},
        "channels": channels or {"console": {}},
        "plugins": {"entries": {"webhooks": {"config": {
            "limits": BIG_LIMITS,  # one source address: the limiter is not what is measured
            "routes": {"bench": {"sessionKey": ROUTE_SESSION, "secret": ROUTE_SECRET}},
        }}}},
    }
    path = work / f"{db.stem}.json5"
    path.write_text(json.dumps(cfg))
    return path


class Gateway:
    """A `hookgate serve` subprocess on a free port; measures start-to-ready and RSS."""

    def __init__(self, work: Path, db: Path, durability: str, extra: tuple[str, ...] = (),
                 channels: dict[str, Any] | None = None) -> None:
        self.cfg = gateway_config(work, db, durability, channels)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(work / f"{db.stem}.log", "wb")  # noqa: SIM115 - closed in __exit__
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [PY, "-m", "hookgate.cli", "serve", "--config", str(self.cfg), "--port", str(self.port), *extra],
            stdout=subprocess.DEVNULL, stderr=self.log)
        wait_http(self.base + "/readyz")
        self.ready_s = time.monotonic() - t0

    def rss(self, field: str = "VmRSS") -> float:
        return rss_mib(self.proc.pid, field)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def seed_flows(db: Path, n: int) -> list[str]:
    """``n`` flows owned by the bench route's session, created through the real service, one commit."""
    import asyncio

    from hookgate.clock import SystemClock
    from hookgate.config.settings import StorageSettings
    from hookgate.flows.rules import new_flow
    from hookgate.store import open_store
    from hookgate.webhooks.schema import parse_action

    async def go() -> list[str]:
        store = open_store(StorageSettings(sqlite_path=str(db), durability="normal"))
        await store.open("cli")
        clock = SystemClock()
        ids: list[str] = []

        def insert(tx: object) -> None:
            for i in range(n):
                action = parse_action({"action": "create_flow", "goal": f"seeded flow {i}", "stateJson": {"i": i}})
                flow_id = tx.new_flow_id()  # type: ignore[attr-defined]  # as create_flow makes them
                flow = new_flow(action, flow_id=flow_id, owner_key=ROUTE_SESSION,  # type: ignore[arg-type]
                                route_controller_id="webhooks/bench", now=clock.now_ms())
                tx.insert_flow(flow)  # type: ignore[attr-defined]
                ids.append(flow.flow_id)

        try:
            await store.flow_write(insert)  # type: ignore[arg-type]
        finally:
            await store.close()
        return ids

    return asyncio.run(go())


def lua_ids(ids: list[str]) -> str:
    return "local ids = {" + ",".join(f'"{i}"' for i in ids) + "}\n"


ROUTE_HEADERS = {"Authorization": f"Bearer {ROUTE_SECRET}", "Content-Type": "application/json"}


def lua_route(path: Path, body_lua: str, prelude: str = "") -> Path:
    hdr = "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in ROUTE_HEADERS.items()) + "}"
    path.write_text(prelude + f"""
local counter = 0
local tid = math.random(1, 1000000000)
local hdrs = {hdr}
request = function()
  counter = counter + 1
  return wrk.format("POST", "{ROUTE}", hdrs, {body_lua})
end
""")
    return path


def lua_mutation_pair(path: Path, ids: list[str], threads: int) -> Path:
    """set_waiting / resume_flow alternating per flow, each with its flow's current revision.

    Each wrk thread owns a slice of the flows and walks it round-robin, so a flow's previous
    mutation has long completed when its turn comes again. wrk calls ``request()`` once more on
    its first thread before the run, to check the script (``script_verify_request``), and never
    sends that request: the first call on that thread counts no revision (it used to leave one
    flow a revision ahead, a 409 at every later visit: 1 – 7 per run)."""
    hdr = "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in ROUTE_HEADERS.items()) + "}"
    per = len(ids) // threads
    path.write_text(lua_ids(ids) + f"""
local next_id = 0
function setup(thread)
  thread:set("slot", next_id)
  next_id = next_id + 1
end
local hdrs = {hdr}
local per = {per}
local i = 0
local revs = {{}}
local verified = false
request = function()
  if slot == 0 and not verified then
    verified = true
    return wrk.format("POST", "{ROUTE}", hdrs, '{{"action":"get_flow","flowId":"' .. ids[1] .. '"}}')
  end
  local k = slot * per + (i % per) + 1
  i = i + 1
  local r = revs[k] or 0
  revs[k] = r + 1
  local verb = (r % 2 == 0) and "set_waiting" or "resume_flow"
  return wrk.format("POST", "{ROUTE}", hdrs,
    '{{"action":"' .. verb .. '","flowId":"' .. ids[k] .. '","expectedRevision":' .. r .. '}}')
end
""")
    return path


def lua_get_flow(path: Path, ids: list[str]) -> Path:
    return lua_route(path, "'{\"action\":\"get_flow\",\"flowId\":\"' .. ids[math.random(#ids)] .. '\"}'",
                     lua_ids(ids))


def wait_runs_idle(db: Path, timeout: float = 120.0) -> None:
    """Until no run is queued or running (the embedded worker has caught up); at once with --no-worker
    runs stay queued, so only a count that keeps falling is waited for."""
    import sqlite3

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            busy = conn.execute("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')").fetchone()[0]
        if busy == 0 or busy == last:
            return
        last = busy
        time.sleep(0.5)


def _halved(args: argparse.Namespace) -> argparse.Namespace:
    """The options with half the duration: one round of a scenario measured in alternating rounds."""
    return argparse.Namespace(**{**vars(args), "duration": max(1, args.duration // 2)})


def _mean(name: str, rounds: list[Result]) -> Result:
    """One row from rounds of a scenario: mean requests/s, p50 and CPU, the worst p99."""
    n = len(rounds)
    return Result(name, sum(r.rps for r in rounds) / n, sum(r.p50_ms for r in rounds) / n,
                  max(r.p99_ms for r in rounds), "", " ".join(r.errors for r in rounds).strip(),
                  sum(r.cpu_us for r in rounds) / n, sum(r.steal for r in rounds) / n)


def hooks_suite(args: argparse.Namespace, work: Path, results: list[Result], notes: list[str]) -> None:
    extra = ("--no-worker",) if args.no_worker else ()
    with Gateway(work, work / "hooks.db", args.durability, extra) as gw:
        time.sleep(1.0)
        rss_idle = gw.rss()
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        message = "'{\"message\":\"bench ' .. tid .. '-' .. counter .. '\"}'"
        scenarios = [
            ("POST /hooks/wake (valid)", lua(work / "wake.lua", "POST", "/hooks/wake", auth,
                                             "'{\"text\":\"bench ' .. tid .. '-' .. counter .. '\",\"mode\":\"now\"}'")),
            ("POST /hooks/wake (wrong token, locked out)",
             lua(work / "wrong.lua", "POST", "/hooks/wake", {"Authorization": "Bearer wrong"}, "'{\"text\":\"x\"}'")),
        ]
        # issue #5 compares mapped hooks with /hooks/agent: run in the order A B C C B A (half the
        # duration each) so the database growing under them costs all three alike
        mapped = [
            ("POST /hooks/agent (valid)", lua(work / "agent.lua", "POST", "/hooks/agent", auth, message)),
            ("POST /hooks/tpl (template mapping → agent)", lua(work / "tpl.lua", "POST", "/hooks/tpl", auth, message)),
            ("POST /hooks/tx (sync transform → agent)", lua(work / "tx.lua", "POST", "/hooks/tx", auth, message)),
        ]
        half = _halved(args)
        with RssSampler(gw.proc.pid) as sampler:
            for name, script in scenarios:
                results.append(wrk(name, gw.base, script, args, gw.proc.pid))
            rounds: dict[str, list[Result]] = {name: [] for name, _ in mapped}
            for name, script in [*mapped, *reversed(mapped)]:
                # with the embedded worker, each round starts once the runs of the previous one are
                # executed: a backlog left by one scenario would otherwise slow the next one down
                wait_runs_idle(work / "hooks.db")
                rounds[name].append(wrk(name, gw.base, script, half, gw.proc.pid))
            wait_runs_idle(work / "hooks.db")
        means = {name: _mean(name, rs) for name, rs in rounds.items()}
        results.extend(means.values())
        agent_rps = means[mapped[0][0]].rps
        for name, _ in mapped[1:]:
            notes.append(f"{name}: {(means[name].rps / agent_rps - 1) * 100:+.1f} % throughput vs /hooks/agent")
        time.sleep(2.0)
        rss_after = gw.rss()
        rss_peak = max(sampler.peak, gw.rss("VmHWM"))
        notes.append(f"hooks: start to ready {gw.ready_s * 1000:.0f} ms; RSS idle {rss_idle:.1f} MiB, "
                     f"peak {rss_peak:.1f} MiB, after {rss_after:.1f} MiB ({(rss_after / rss_idle - 1) * 100:+.1f} % vs idle)")


def webhooks_suite(args: argparse.Namespace, work: Path, results: list[Result], notes: list[str]) -> None:
    # create_flow and the mutation pair on a fresh database; RSS is watched as flows accumulate
    db = work / "flows.db"
    pair_ids = seed_flows(db, 20_000)
    os.sync()  # the seeding's writeback is set-up, not the workload (as for get_flow below)
    with Gateway(work, db, args.durability) as gw:
        time.sleep(0.5)
        before = gw.rss()
        results.append(wrk("create_flow (valid)", gw.base, lua_route(
            work / "create.lua", "'{\"action\":\"create_flow\",\"goal\":\"bench ' .. tid .. '-' .. counter .. '\"}'"),
            args, gw.proc.pid))
        after_create = gw.rss()
        results.append(wrk("set_waiting/resume_flow pair", gw.base,
                           lua_mutation_pair(work / "pair.lua", pair_ids, args.threads), args, gw.proc.pid))
        after = gw.rss()
        notes.append(f"webhooks: RSS {before:.1f} MiB before create_flow, {after_create:.1f} MiB after it, "
                     f"{after:.1f} MiB after the mutations (peak {gw.rss('VmHWM'):.1f} MiB)")
    # get_flow independent of the number of stored flows. Both databases are seeded and synced first
    # (the kernel writing back 100 000 freshly seeded flows slowed the run that followed), both
    # gateways run side by side, and the rounds go 100, 100 000, 100 000, 100 (half the duration
    # each) so the VM's drift over the minute costs both alike
    sizes = (100, 100_000)
    seeded = {n: seed_flows(work / f"get{n}.db", n) for n in sizes}
    os.sync()
    half = _halved(args)
    with Gateway(work, work / "get100.db", args.durability) as small, \
            Gateway(work, work / "get100000.db", args.durability) as big:
        gateways = {100: small, 100_000: big}
        time.sleep(0.5)
        rounds: dict[int, list[Result]] = {n: [] for n in sizes}
        for n in (*sizes, *reversed(sizes)):
            gw = gateways[n]
            rounds[n].append(wrk(f"get_flow ({n} flows stored)", gw.base, lua_get_flow(work / f"get{n}.lua", seeded[n]),
                                 half, gw.proc.pid))
    means = {n: _mean(f"get_flow ({n} flows stored)", rounds[n]) for n in sizes}
    results.extend(means.values())
    small_rps, big_rps = means[100].rps, means[100_000].rps
    notes.append(f"get_flow: {(big_rps / small_rps - 1) * 100:+.1f} % throughput with 100 000 flows stored vs 100 "
                 f"(rounds 100, 100 000, 100 000, 100)")
    # list_flows over 10 000 flows
    db = work / "list.db"
    seed_flows(db, 10_000)
    with Gateway(work, db, args.durability) as gw:
        results.append(wrk("list_flows (10 000 flows in the session)", gw.base,
                           lua_route(work / "list.lua", "'{\"action\":\"list_flows\"}'"), args, gw.proc.pid))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--durability", default="full", choices=["full", "normal"])
    ap.add_argument("--only", choices=["hooks", "webhooks", "runs", "deliveries"], help="run one suite")
    ap.add_argument("--no-worker", action="store_true",
                    help="hooks suite: measure ingest alone (serve --no-worker: runs and heartbeats stay queued)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hookgate-bench-"))
    # The ceiling is measured before and again after the ratio suites, and the ratios use the mean:
    # this VM's speed drifts by tens of percent over minutes, and a ceiling taken at one end of a
    # ten-minute run skews every ratio by that drift.
    first = minimal_ceiling(args, work)
    first.name = "minimal ASGI app (ceiling, start)"
    results: list[Result] = [first]
    if args.only in (None, "hooks", "webhooks"):
        # For reference, not a ceiling: the same app on uvicorn's own protocol (two writes per
        # response, sent at once); hookgate's protocol sends a loop pass's writes together.
        stock = minimal_ceiling(args, work, stock=True)
        stock.name = "minimal app, uvicorn's protocol (reference)"
        results.append(stock)
        # Nor this: the floor under any Python server here (hookgate answers a request read whole
        # without uvicorn's ASGI cycle, so the ceiling is an ASGI app's, not the machine's).
        floor = minimal_ceiling(args, work, bare=True)
        floor.name = "bare httptools protocol, no ASGI (reference)"
        results.append(floor)
    notes: list[str] = []
    if args.only in (None, "hooks"):
        hooks_suite(args, work, results, notes)
    if args.only in (None, "webhooks"):
        webhooks_suite(args, work, results, notes)
    ceilings = [first]
    if args.only in (None, "hooks", "webhooks"):
        last = minimal_ceiling(args, work)
        last.name = "minimal ASGI app (ceiling, end)"
        results.append(last)
        ceilings.append(last)
    ceiling = sum(c.rps for c in ceilings) / len(ceilings)
    ceiling_cpu = sum(c.cpu_us for c in ceilings) / len(ceilings)
    if len(ceilings) > 1:
        notes.insert(0, f"ratios against the mean ceiling {ceiling:.0f} req/s "
                        f"(start {first.rps:.0f}, end {ceilings[-1].rps:.0f})")
    if args.only in (None, "runs"):
        from runs import runs_suite

        notes.extend(runs_suite(work, args.durability))
    if args.only in (None, "deliveries"):
        from deliveries import deliveries_suite

        notes.extend(deliveries_suite(work, args.durability))

    print(f"\nhookgate bench — wrk -t{args.threads} -c{args.connections} -d{args.duration}s, "
          f"durability {args.durability}, {os.cpu_count()} cores\n")
    print(f"{'scenario':44} {'req/s':>9} {'ratio':>6} {'p50 ms':>8} {'p99 ms':>8} {'cpu us':>7} {'cpu r':>6} "
          f"{'steal':>6}  notes")
    for r in results:
        print(f"{r.name:44} {r.rps:9.0f} {r.rps / ceiling:6.2f} {r.p50_ms:8.2f} {r.p99_ms:8.2f} "
              f"{r.cpu_us:7.0f} {ceiling_cpu / r.cpu_us if r.cpu_us else float('nan'):6.2f} "
              f"{r.steal * 100:5.1f}%  {r.errors}")
    print()
    print("cpu us: the server's CPU time (all threads) per request; cpu r: the ceiling's cpu us over the row's;")
    print("steal: the share of the machine's CPU time the hypervisor gave other guests during the row")
    print("(a row with a high one ran on a slower machine than its neighbours).")
    stolen = [r.name for r in results if r.steal >= STEAL_WARN]
    if stolen:
        print(f"steal ≥ {STEAL_WARN:.0%} during: {'; '.join(stolen)} — the host, not hookgate, set those figures")
    for note in notes:
        print(note)
    if args.json:
        Path(args.json).write_text(json.dumps({"ceiling": ceiling, "results": [r.__dict__ for r in results],
                                               "notes": notes}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
