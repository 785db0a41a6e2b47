"""The embedded worker end to end: hook runs, summaries, heartbeats, timeouts, crash recovery, drain."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from gateway import AUTH, GatewayFactory, RunningGateway, wait_for
from workerkit import config, db, events, post_agent, run_row


def test_hook_run_summary_then_heartbeat_consumes_it(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    run_id = post_agent(gw, message="Deploy 42 finished", name="Deploy")
    run = wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] == "ok" and r)
    assert run["reply"] == "echo: Deploy 42 finished" and run["attempt"] == 1
    assert run["started_at"] is not None and run["ended_at"] >= run["started_at"]
    with db(gw) as conn:
        transcript = conn.execute("SELECT role, text FROM transcript_messages WHERE run_id = ? ORDER BY id",
                                  (run_id,)).fetchall()
    assert [t[0] for t in transcript] == ["user", "assistant"]
    assert "<<<EXTERNAL_UNTRUSTED_CONTENT id=" in transcript[0][1]  # the prompt was wrapped
    assert transcript[0][1].endswith("Return your response as plain text; it will be delivered automatically.")
    shown = json.loads(gw.cli("runs", "show", run_id).stdout)
    assert shown["status"] == "ok" and shown["attempt"] == 1 and shown["durationMs"] >= 0
    assert set(shown["prompt"]) == {"bytes", "sha256"} and set(shown["reply"]) == {"bytes", "sha256"}
    full = json.loads(gw.cli("runs", "show", run_id, "--content").stdout)
    assert full["prompt"] == transcript[0][1] and full["reply"] == "echo: Deploy 42 finished"
    listed = gw.cli("runs", "list", "--kind", "hook").stdout.splitlines()
    assert run_id in listed[1] and " ok " in listed[1]
    # no last route and no whatsapp: no target → the summary goes to the main session, wakeMode now wakes
    summary = wait_for(lambda: [e for e in events(gw) if e["text"].startswith("Hook Deploy")])
    assert summary[0]["text"] == "Hook Deploy: echo: Deploy 42 finished"
    consumed = wait_for(lambda: [e for e in events(gw) if e["status"] == "consumed"], timeout=10)
    assert consumed[0]["consumed_by_run_id"]
    with db(gw) as conn:
        beat = conn.execute("SELECT * FROM runs WHERE kind = 'heartbeat'").fetchone()
        assert beat["status"] == "ok" and beat["reply"].startswith("echo: System: [")
        assert beat["created_at"] == beat["started_at"] <= beat["ended_at"]  # runs list shows its duration
        assert conn.execute("SELECT count(*) FROM heartbeat_requests WHERE consumed = 0").fetchone()[0] == 0


def test_delivery_to_console_sets_last_route_and_posts_no_summary(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    run_id = post_agent(gw, message="hello", channel="console", to="ops-room", name="Greeter")
    wait_for(lambda: run_row(gw, run_id).get("status") == "ok")
    out = wait_for(lambda: [json.loads(line) for line in gw.read_stdout().splitlines() if line.startswith("{")])
    assert out[0] == {"channel": "console", "to": "ops-room", "text": "echo: hello", "runId": run_id, "agentId": "main"}

    def delivered() -> list[dict[str, Any]]:
        return [d for d in json.loads(gw.cli("runs", "show", run_id).stdout)["deliveries"] if d["status"] == "delivered"]

    [delivery] = wait_for(delivered)
    assert (delivery["channel"], delivery["to"], delivery["attempts"]) == ("console", "ops-room", 1)
    assert delivery["attemptLog"][0]["outcome"] == "delivered"
    # delivered: no summary, neither with the run's commit nor after the delivery
    assert not [e for e in events(gw) if e["text"].startswith("Hook Greeter")]
    with db(gw) as conn:
        route = conn.execute("SELECT last_channel, last_to FROM sessions WHERE key = 'agent:main:main'").fetchone()
    assert tuple(route) == ("console", "ops-room")


def test_failures_timeouts_and_model_rejections_post_status_summaries(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config(agents={"defaults": {"models": {"echo/echo-1": {"alias": "e"}}}}))
    failed = post_agent(gw, message="please [[echo:fail]]", name="Fail", deliver=False)
    slow = post_agent(gw, message="[[echo:sleep=5]]", name="Slow", timeoutSeconds=1, deliver=False)
    bad_model = post_agent(gw, message="x", name="Model", model="openai/gpt-x", deliver=False)
    quiet = post_agent(gw, message="fine", name="Quiet", deliver=False)
    wait_for(lambda: all(run_row(gw, r).get("status") not in ("queued", "running")
                         for r in (failed, slow, bad_model, quiet)), timeout=15)
    assert run_row(gw, failed)["status"] == "error"
    assert run_row(gw, failed)["error"] == "echo runtime: requested failure"
    assert run_row(gw, slow)["status"] == "timed_out" and run_row(gw, slow)["error"] == "run timed out after 1s"
    assert run_row(gw, bad_model)["status"] == "error"
    assert run_row(gw, bad_model)["error"] == (
        "model 'openai/gpt-x' rejected by agents.defaults.models allowlist: openai/gpt-x is not in [echo/echo-1]"
    )
    assert run_row(gw, quiet)["status"] == "ok"
    texts = {e["text"] for e in events(gw)}
    assert "Hook Fail (error): echo runtime: requested failure" in texts
    assert "Hook Slow (timed_out): run timed out after 1s" in texts
    assert not [t for t in texts if t.startswith("Hook Quiet")]  # ok + deliver false → no summary


def test_kill9_mid_run_resumes_then_ends_lost(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    resumed = post_agent(gw, message="[[echo:sleep=2]] resumable", name="Resume", deliver=False)
    wait_for(lambda: run_row(gw, resumed).get("status") == "running")
    gw.kill9()
    gw.start()
    row = wait_for(lambda: (r := run_row(gw, resumed)) and r["status"] == "ok" and r, timeout=15)
    assert row["attempt"] == 2

    doomed = post_agent(gw, message="[[echo:sleep=30]] doomed", name="Doomed", deliver=False)
    wait_for(lambda: run_row(gw, doomed).get("status") == "running")
    gw.kill9()
    gw.start()
    second = wait_for(lambda: (r := run_row(gw, doomed)).get("attempt") == 2 and r, timeout=10)
    gw.kill9()
    gw.start()
    row = wait_for(lambda: (r := run_row(gw, doomed)) and r["status"] == "lost" and r, timeout=10)
    assert row["error"] == "run interrupted; retry limit reached"
    assert row["attempt"] == 2  # model.md §5.1: 1 or 2 — the third claim is not an attempt
    assert row["started_at"] == second["started_at"]  # nor is its time a start
    assert json.loads(gw.cli("runs", "show", doomed).stdout)["attempt"] == 2
    assert "Hook Doomed (lost): run interrupted; retry limit reached" in {e["text"] for e in events(gw)}


def test_sigterm_releases_running_runs_without_consuming_an_attempt(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config(gateway={"drainTimeoutSeconds": 1}))
    run_id = post_agent(gw, message="[[echo:sleep=3]] long", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running")
    started = time.monotonic()
    assert gw.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 5
    row = run_row(gw, run_id)
    assert (row["status"], row["attempt"], row["leased_by"]) == ("queued", 1, None)
    gw.start()
    row = wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] == "ok" and r, timeout=15)
    assert row["attempt"] == 1


def test_wake_now_triggers_a_heartbeat_and_coalesces(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config())
    clients = [gw.client() for _ in range(3)]
    for c in clients:  # connected before the burst
        assert c.get("/healthz").status_code == 200
    barrier = threading.Barrier(3)

    def wake(c: Any, text: str) -> int:
        barrier.wait()
        return int(c.post("/hooks/wake", json={"text": text}, headers=AUTH).status_code)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # sent together: well within 250 ms
        assert list(pool.map(wake, clients, ("one", "two", "three"))) == [200, 200, 200]
    for c in clients:
        c.close()
    wait_for(lambda: all(e["status"] == "consumed" for e in events(gw)) and len(events(gw)) == 3, timeout=10)
    with db(gw) as conn:
        beats = conn.execute("SELECT reply FROM runs WHERE kind = 'heartbeat'").fetchall()
    assert len(beats) == 1  # three wakes within 250 ms: one turn
    assert "one" in beats[0][0] and "three" in beats[0][0]


def test_scheduled_heartbeats_ack_and_skip(gateway_factory: GatewayFactory) -> None:
    cfg = config(agents={"list": [{"id": "main", "default": True, "heartbeat": {"every": "1s", "prompt": "Anything?"}},
                                  {"id": "hooks", "heartbeat": {"every": "1s"}}]})
    gw = gateway_factory(cfg)

    def beats_of_main() -> list[tuple[str, str]]:
        with db(gw) as conn:
            rows = conn.execute("SELECT agent_id, reply FROM runs WHERE kind = 'heartbeat'").fetchall()
        return rows if len([b for b in rows if b[0] == "main"]) >= 2 else []

    beats = wait_for(beats_of_main)
    # main has a prompt: a turn about every second, acked by the echo runtime (no events → HEARTBEAT_OK)
    assert len([b for b in beats if b[0] == "main"]) >= 2
    assert all(b[1] == "HEARTBEAT_OK" for b in beats)
    # hooks has neither events nor a prompt: its turns are skipped without a model call or a run record
    assert not [b for b in beats if b[0] == "hooks"]
    with gw.client() as c:
        metrics = c.get("/metrics").text
    assert 'hookgate_heartbeats_total{outcome="ack"}' in metrics
    assert 'hookgate_heartbeats_total{outcome="skipped"}' in metrics


def test_retention_sweeps_old_runs_transcripts_and_consumed_events(gateway_factory: GatewayFactory) -> None:
    # runDays / eventDays of ~1.7 s (0.00002 days) and a sweep every 0.3 s (operations.md §4.1)
    retention = {"runDays": 0.00002, "eventDays": 0.00002, "sweepSeconds": 0.3}
    gw = gateway_factory(config(storage={"leaseSeconds": 1, "retention": retention}))
    run_id = post_agent(gw, message="Deploy 42 finished", name="Deploy")
    wait_for(lambda: run_row(gw, run_id).get("status") == "ok")
    # the run's summary reached the main session; the heartbeat it asked for consumes it
    wait_for(lambda: any(e["status"] == "consumed" for e in events(gw)))
    wait_for(lambda: run_row(gw, run_id) == {} and not events(gw), timeout=15)
    with db(gw) as conn:
        assert conn.execute("SELECT count(*) FROM transcript_messages WHERE run_id = ?", (run_id,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM heartbeat_requests WHERE consumed = 1").fetchone()[0] == 0
    shown = gw.cli("runs", "show", run_id)
    assert (shown.returncode, shown.stderr.strip()) == (1, f"run {run_id} not found")
    logged = wait_for(lambda: [e for e in gw.log_events() if e["event"] == "retention.swept" and e.get("runs")])
    assert sum(e["runs"] for e in logged) >= 1


def test_storage_changes_wait_for_a_restart(gateway_factory: GatewayFactory) -> None:
    """README §4: a reload logs storage.* as restart-required and otherwise ignores it."""
    cfg = config(storage={"leaseSeconds": 1, "retention": {"sweepSeconds": 0.3}})
    gw = gateway_factory(cfg)
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "kept", "mode": "now"}, headers=AUTH).status_code == 200
    wait_for(lambda: [e["status"] for e in events(gw)] == ["consumed"])
    cfg["storage"]["retention"] = {"sweepSeconds": 0.3, "eventDays": 0.00001}  # ~0.9 s
    gw.config_path.write_text(json.dumps(cfg))
    gw.signal(signal.SIGHUP)
    assert gw.wait_log("config.reload_restart_required")["keys"] == ["storage"]
    time.sleep(2.0)  # several sweeps, each past the new (ignored) retention
    assert [e["text"] for e in events(gw)] == ["kept"]
    gw.stop()
    gw.start()
    assert wait_for(lambda: events(gw) == [], timeout=5)


def schedule_row(gw: RunningGateway, agent: str = "main") -> dict[str, Any]:
    with db(gw) as conn:
        row = conn.execute("SELECT * FROM heartbeat_schedule WHERE agent_id = ?", (agent,)).fetchone()
    return dict(row) if row else {}


def heartbeat_runs(gw: RunningGateway) -> int:
    with db(gw) as conn:
        return int(conn.execute("SELECT count(*) FROM runs WHERE kind = 'heartbeat'").fetchone()[0])


def test_heartbeat_schedule_follows_the_interval_across_restart_and_reload(gateway_factory: GatewayFactory) -> None:
    """model.md §6.1: `0` disables the schedule; a new interval applies from the next start or reload."""
    cfg = config(agents={"list": [{"id": "main", "default": True, "heartbeat": {"every": "0"}}]})
    gw = gateway_factory(cfg)
    wait_for(lambda: schedule_row(gw))
    assert schedule_row(gw)["due_at"] is None
    gw.stop()
    cfg["agents"] = {"list": [{"id": "main", "default": True, "heartbeat": {"every": "1s"}}]}
    gw.config_path.write_text(json.dumps(cfg))
    gw.start()
    wait_for(lambda: heartbeat_runs(gw) + len([e for e in gw.log_events() if e["event"] == "heartbeat.skipped"]) >= 2,
             timeout=6)
    # back to 0 by a reload: the schedule stops (a turn in progress may still end)
    cfg["agents"] = {"list": [{"id": "main", "default": True, "heartbeat": {"every": "0"}}]}
    gw.config_path.write_text(json.dumps(cfg))
    gw.signal(signal.SIGHUP)
    wait_for(lambda: schedule_row(gw).get("due_at") is None and schedule_row(gw).get("leased_by") is None, timeout=5)
    with gw.client() as c:  # wakes still work with the schedule off
        assert c.post("/hooks/wake", json={"text": "still here"}, headers=AUTH).status_code == 200
    wait_for(lambda: [e["status"] for e in events(gw) if e["text"] == "still here"] == ["consumed"])
    assert schedule_row(gw)["due_at"] is None


def test_heartbeat_lease_is_renewed_and_released_on_sigterm(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config(gateway={"drainTimeoutSeconds": 1}))  # leaseSeconds 1: renewed every ~0.33 s
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "[[echo:sleep=10]] slow turn"}, headers=AUTH).status_code == 200
    first = wait_for(lambda: (r := schedule_row(gw)) and r["leased_by"] and r)
    time.sleep(1.5)  # past the first lease
    renewed = schedule_row(gw)
    assert renewed["leased_by"] == first["leased_by"] and renewed["lease_until"] > first["lease_until"]
    assert gw.stop(signal.SIGTERM) == 0
    row = schedule_row(gw)
    assert (row["leased_by"], row["lease_until"]) == (None, None)  # given back: the next start claims it at once
    assert [e["status"] for e in events(gw)] == ["pending"]  # the event waits for that turn
    with db(gw) as conn:
        assert conn.execute("SELECT count(*) FROM heartbeat_requests WHERE consumed = 0").fetchone()[0] == 1


def test_sigterm_stops_claiming_while_http_drains(gateway_factory: GatewayFactory) -> None:
    """operations.md §1.1: on SIGTERM workers stop claiming; the run queued behind a running one
    is not started during the drain."""
    gw = gateway_factory(config(gateway={"drainTimeoutSeconds": 6}, agents={"defaults": {"maxConcurrentRuns": 1}}))
    first = post_agent(gw, message="[[echo:sleep=3]] first", deliver=False)  # still running at the signal
    second = post_agent(gw, message="second", deliver=False)
    wait_for(lambda: run_row(gw, first).get("status") == "running")
    # a request whose body never completes keeps the HTTP drain busy for the whole drain timeout
    sock = socket.create_connection(("127.0.0.1", gw.port))
    sock.sendall(b"POST /hooks/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hook-secret\r\n"
                 b"Content-Length: 50\r\n\r\n{")
    time.sleep(0.2)
    try:
        assert gw.stop(signal.SIGTERM) == 0
    finally:
        sock.close()
    assert run_row(gw, first)["status"] == "ok"  # the running one finished within the drain
    row = run_row(gw, second)
    assert (row["status"], row["started_at"], row["attempt"]) == ("queued", None, 1)
    assert not [e for e in gw.log_events() if e["event"] == "run.started" and e.get("run_id") == second]


def test_thinking_falls_through_unrecognised_values(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """model.md §5.3 / §9.3: action → agent → agents.defaults → off, an unrecognised value passing on."""
    script = tmp_path / "think.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\necho \"thinking=$HOOKGATE_THINKING\"\n")
    script.chmod(0o755)
    runtime = {"kind": "command", "command": [str(script)]}
    gw = gateway_factory(config(agents={
        "defaults": {"runtime": runtime, "thinking": "ultrathink"},
        "list": [{"id": "main", "default": True, "thinking": "bogus"}],
    }))

    def reply(**body: Any) -> str:
        run_id = post_agent(gw, message="m", deliver=False, **body)
        return str(wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] == "ok" and r)["reply"])

    assert reply() == "thinking=high"  # the agent's "bogus" is ignored: the default's ultrathink → high
    assert reply(thinking="nonsense") == "thinking=high"
    assert reply(thinking="min") == "thinking=minimal"
    gw.stop()
    gw.config_path.write_text(json.dumps(config(agents={
        "defaults": {"runtime": runtime, "thinking": "??"}, "list": [{"id": "main", "default": True}]})))
    gw.start()
    assert reply() == "thinking=off"  # nothing recognised anywhere


def test_turns_skipped_at_preflight_leave_their_events_pending_and_uncharged(gateway_factory: GatewayFactory) -> None:
    """model.md §4.1: only a failed turn (`error`, `timed_out`) charges its events a failed turn; a turn
    whose runtime fails its preflight ends `skipped` (§5.4) — no model saw the events, and three such
    turns used to drop one."""
    cfg = config(agents={"list": [{
        "id": "main", "default": True, "heartbeat": {"every": "0"},
        "runtime": {"kind": "command", "command": ["/nonexistent/hookgate-test-model"]},
    }]})
    gw = gateway_factory(cfg)

    def finished() -> list[dict[str, Any]]:
        with db(gw) as conn:
            return [dict(r) for r in conn.execute(
                "SELECT status, error FROM runs WHERE kind = 'heartbeat' AND status NOT IN ('queued', 'running')")]

    for turn in range(1, 4):
        with gw.client() as c:  # the same text each time: coalesced, but every wake asks for a turn
            assert c.post("/hooks/wake", json={"text": "Disk almost full", "mode": "now"},
                          headers=AUTH).status_code == 200
        wait_for(lambda turn=turn: len(finished()) >= turn, timeout=10)
    assert finished() == [{"status": "skipped",
                           "error": "runtime command not found: /nonexistent/hookgate-test-model"}] * 3
    assert [(e["status"], e["failed_turns"]) for e in events(gw)] == [("pending", 0)]
    with gw.client() as c:
        metrics = c.get("/metrics").text
    assert 'hookgate_heartbeats_total{outcome="skipped"} 3.0' in metrics
    assert 'hookgate_heartbeats_total{outcome="failed"}' not in metrics


def test_an_interval_of_centuries_serves_and_wakes_still_run_turns(gateway_factory: GatewayFactory) -> None:
    """model.md §6.1: `heartbeat.every` is `<integer><s|m|h|d>`; a 16-digit number of days is valid, and
    its due time once overflowed SQLite's INTEGER and stopped `serve` at startup."""
    cfg = config(agents={"list": [{"id": "main", "default": True, "heartbeat": {"every": "9999999999999999d"}}]})
    gw = gateway_factory(cfg)
    with gw.client() as c:
        assert c.post("/hooks/wake", json={"text": "still here", "mode": "now"}, headers=AUTH).status_code == 200
    wait_for(lambda: [e["status"] for e in events(gw)] == ["consumed"], timeout=10)
    with db(gw) as conn:
        due = conn.execute("SELECT due_at FROM heartbeat_schedule WHERE agent_id = 'main'").fetchone()[0]
    assert due > time.time() * 1000 + 99 * 365 * 86_400_000  # a century out, not a turn soon


def _command_agent(tmp_path: Path, body: str) -> dict[str, Any]:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return config(agents={"defaults": {"runtime": {"kind": "command", "command": [str(script)]}},
                          "list": [{"id": "main", "default": True}]})


def test_a_command_stopped_with_the_gateway_is_given_back_not_failed(gateway_factory: GatewayFactory,
                                                                     tmp_path: Path) -> None:
    """systemd's default KillMode=control-group sends SIGTERM to the gateway and its commands at once:
    the command died first and its run ended `error` ("command exited with code -15"), its attempt
    spent, never run again. Now it is given back as at a drain's end: queued, attempt 1."""
    pid_file = tmp_path / "cmd.pid"
    gw = gateway_factory(_command_agent(tmp_path, f"echo $$ > {pid_file}\ncat > /dev/null\nexec sleep 30\n"))
    run_id = post_agent(gw, message="slow", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running" and pid_file.exists())
    pgid = int(pid_file.read_text())
    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGTERM)
    os.killpg(pgid, signal.SIGTERM)
    gw.proc.wait(timeout=20)  # (gw.stop would send a second SIGTERM: an immediate exit if the drain runs on)
    assert gw.stop() == 0
    row = run_row(gw, run_id)
    assert (row["status"], row["attempt"], row["error"]) == ("queued", 1, None), row
    assert [e["reason"] for e in gw.log_events() if e["event"] == "run.released"] == ["command_stopped_with_gateway"]


def test_a_command_killed_while_the_gateway_runs_is_an_error(gateway_factory: GatewayFactory,
                                                              tmp_path: Path) -> None:
    pid_file = tmp_path / "cmd.pid"
    gw = gateway_factory(_command_agent(tmp_path, f"echo $$ > {pid_file}\ncat > /dev/null\nexec sleep 30\n"))
    run_id = post_agent(gw, message="slow", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running" and pid_file.exists())
    os.killpg(int(pid_file.read_text()), signal.SIGTERM)
    row = wait_for(lambda: (r := run_row(gw, run_id)) and r["status"] != "running" and r)
    assert (row["status"], row["error"]) == ("error", "command exited with code -15"), row


def test_a_second_stop_signal_kills_the_running_commands(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """The second signal exits at once (operations.md §1.1); the commands of runs in flight went on
    running, and after the restart the same run executed a second time beside the first."""
    pid_file = tmp_path / "cmd.pid"
    gw = gateway_factory(_command_agent(tmp_path, f"echo $$ > {pid_file}\ncat > /dev/null\n"
                                                   "trap '' TERM\nsleep 30 & wait $!; sleep 30\n"))
    run_id = post_agent(gw, message="slow", deliver=False)
    wait_for(lambda: run_row(gw, run_id).get("status") == "running" and pid_file.exists())
    pgid = int(pid_file.read_text())
    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert gw.stop(signal.SIGTERM, timeout=10) == 1

    def group_gone() -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False
    assert wait_for(group_gone, timeout=5), "the command's process group outlived the gateway"
