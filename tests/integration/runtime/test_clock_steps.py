"""A wall clock that steps back (NTP correcting a clock, a VM restored from a snapshot) under a real
`hookgate serve`: its leases, retry times and heartbeat schedule are wall-clock times in the file,
and none may hold its job for the length of the step.

The server runs with ``wallclock_shift.c`` preloaded: its wall clock is the real one plus the seconds
in a file the test writes, its monotonic clock the real one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gateway import GatewayFactory, RunningGateway, wait_for
from receiver import running_receiver
from workerkit import config, db, post_agent, run_row

HERE = Path(__file__).resolve().parent
HOUR = 3600


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "the clock-step tests build an LD_PRELOAD library: apt-get install gcc libc6-dev"
    out = tmp_path_factory.mktemp("shim") / "wallclock_shift.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(HERE / "wallclock_shift.c"), "-ldl"],
                   check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture
def stepped(shim: Path, tmp_path: Path) -> tuple[dict[str, str], Callable[[float], None]]:
    """The environment that gives a server the shifted wall clock, and how to set the shift."""
    shift_file = tmp_path / "wall-shift"
    shift_file.write_text("0")
    return ({"LD_PRELOAD": str(shim), "WALLCLOCK_SHIFT_FILE": str(shift_file)},
            lambda seconds: shift_file.write_text(str(seconds)))


def heartbeats(gw: RunningGateway) -> int:
    with db(gw) as conn:
        return int(conn.execute("SELECT count(*) FROM runs WHERE kind = 'heartbeat'").fetchone()[0])


def test_the_preloaded_clock_moves_only_the_wall_clock(shim: Path, tmp_path: Path) -> None:
    (tmp_path / "shift").write_text(str(-HOUR))
    out = subprocess.run([sys.executable, "-c", "import time; print(time.time(), time.monotonic())"],
                         env={"LD_PRELOAD": str(shim), "WALLCLOCK_SHIFT_FILE": str(tmp_path / "shift")},
                         capture_output=True, text=True, check=True, timeout=30)
    wall, mono = map(float, out.stdout.split())
    assert abs(wall - (time.time() - HOUR)) < 30 and abs(mono - time.monotonic()) < 30


def test_heartbeats_keep_their_interval_when_the_clock_steps_back(
        gateway_factory: GatewayFactory, stepped: tuple[dict[str, str], Callable[[float], None]]) -> None:
    """The next turn was due an interval after the last one's end, in wall time: a step back of an
    hour put it an hour away, while the process ran and after a restart alike."""
    env, shift = stepped
    cfg = config(agents={"list": [{"id": "main", "default": True, "heartbeat": {"every": "1s", "prompt": "Anything?"}}]})
    gw = gateway_factory(cfg, env=env)
    wait_for(lambda: heartbeats(gw) >= 1)
    shift(-HOUR)
    before = heartbeats(gw)
    wait_for(lambda: heartbeats(gw) >= before + 2, timeout=15)
    stepped_back = [e for e in gw.flushed_log_events() if e["event"] == "clock.stepped_back"]
    assert len(stepped_back) == 1 and abs(stepped_back[0]["step_ms"] - HOUR * 1000) < 5000
    assert stepped_back[0]["level"] == "warning"
    # across a restart: the step happens while no server runs
    gw.stop()
    shift(-2 * HOUR)
    gw.start()
    before = heartbeats(gw)
    wait_for(lambda: heartbeats(gw) >= before + 2, timeout=15)


def test_a_delivery_retry_waits_its_backoff_not_the_step(
        gateway_factory: GatewayFactory, stepped: tuple[dict[str, str], Callable[[float], None]]) -> None:
    """A retry due a second after a failed attempt was put an hour away by a step back of an hour,
    and every later delivery to the same target waited behind it (per-target order)."""
    env, shift = stepped
    with running_receiver() as receiver:
        receiver.script = [(500, {})]
        cfg = config()
        cfg["channels"] = {"webhook": {"url": receiver.url}}
        gw = gateway_factory(cfg, env=env)
        first = post_agent(gw, message="first", channel="webhook", to="room")
        wait_for(lambda: len(receiver.received) == 1)  # the failed attempt: a retry in ~1 s
        shift(-HOUR)
        second = post_agent(gw, message="second", channel="webhook", to="room")
        wait_for(lambda: len(receiver.received) == 3, timeout=15)
        assert [r[2]["text"] for r in receiver.received] == ["echo: first", "echo: first", "echo: second"]
        for run_id in (first, second):
            [delivery] = json.loads(gw.cli("runs", "show", run_id, check=True).stdout)["deliveries"]
            assert delivery["status"] == "delivered"


def test_a_crashed_run_resumes_after_a_lease_when_the_clock_stepped_back(
        gateway_factory: GatewayFactory, stepped: tuple[dict[str, str], Callable[[float], None]]) -> None:
    """The dead process's lease ended a lease's length after its last renewal, in wall time: with the
    clock an hour back at the restart, the run stayed `running` for the hour."""
    env, shift = stepped
    gw = gateway_factory(config(), env=env)  # leases of 1 s
    run_id = post_agent(gw, message="[[echo:sleep=2]] resumable", name="Resume", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running")
    gw.kill9()
    shift(-HOUR)
    gw.start()
    row: dict[str, Any] = wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] == "ok" and r, timeout=15)
    assert row["attempt"] == 2
    assert 'run.resumed' in {e["event"] for e in gw.flushed_log_events()}
