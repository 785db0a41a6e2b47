"""The command runtime with real subprocesses (model.md §8, §5.3 cancellation)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hookgate.agents.base import AgentRuntimeError, RuntimeRequest, build_runtime, preflight
from hookgate.agents.command import CommandRuntime
from hookgate.config.settings import AgentSettings


def request(**changes: Any) -> RuntimeRequest:
    fields: dict[str, Any] = {
        "agent_id": "ops",
        "run_kind": "task",
        "session_key": "hook:deploy",
        "run_id": "run-42",
        "model": "local-1",
        "thinking": "high",
        "system_prompt": "Be terse.",
        "history": (("user", "before"), ("assistant", "ack")),
        "prompt": "Deploy état ✓",
        "subject": "x",
    }
    fields.update(changes)
    return RuntimeRequest(**fields)


def python_script(tmp_path: Path, body: str, name: str = "agent.py") -> list[str]:
    path = tmp_path / name
    path.write_text("import json, os, signal, sys, time\n" + body)
    return [sys.executable, str(path)]


def shell_script(tmp_path: Path, body: str, name: str = "agent.sh") -> list[str]:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return [str(path)]


def runtime(argv: list[str], **config: Any) -> CommandRuntime:
    rt = build_runtime(AgentSettings(id="ops", runtime={"kind": "command", "command": argv, **config}))
    assert isinstance(rt, CommandRuntime)
    return rt


async def test_text_input_and_reply(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, 'printf "got: "\ncat\nprintf "\\n\\n\\n"\n')
    assert preflight(AgentSettings(id="ops", runtime={"kind": "command", "command": argv})) is None
    assert await runtime(argv).complete(request()) == "got: Deploy état ✓"


async def test_trailing_newlines_only_are_removed(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, 'printf "  line one\\n\\nline two  \\n\\n"\n')
    assert await runtime(argv).complete(request()) == "  line one\n\nline two  "


async def test_json_input(tmp_path: Path) -> None:
    out = tmp_path / "stdin.json"
    argv = python_script(
        tmp_path,
        f"data = sys.stdin.read()\nopen({str(out)!r}, 'w').write(data)\n"
        "print(json.dumps({'text': 'from json', 'extra': 1}))\n",
    )
    assert await runtime(argv, input="json").complete(request()) == "from json"
    assert json.loads(out.read_text()) == {
        "protocolVersion": 1,
        "kind": "task",
        "agentId": "ops",
        "sessionKey": "hook:deploy",
        "runId": "run-42",
        "model": "local-1",
        "thinking": "high",
        "system": "Be terse.",
        "messages": [
            {"role": "user", "content": "before"},
            {"role": "assistant", "content": "ack"},
            {"role": "user", "content": "Deploy état ✓"},
        ],
    }
    assert list(json.loads(out.read_text())) == [
        "protocolVersion",
        "kind",
        "agentId",
        "sessionKey",
        "runId",
        "model",
        "thinking",
        "system",
        "messages",
    ]


@pytest.mark.parametrize(
    ("stdout", "reply"),
    [
        ('{"text": "a"}\n', "a"),
        ('{"reply": "a"}\n', '{"reply": "a"}'),
        ('{"text": 5}', '{"text": 5}'),
        ("plain words\n", "plain words"),
        ("[1, 2]\n", "[1, 2]"),
        ("{not json\n", "{not json"),
    ],
)
async def test_json_mode_reply(tmp_path: Path, stdout: str, reply: str) -> None:
    argv = python_script(tmp_path, f"sys.stdin.read()\nsys.stdout.write({stdout!r})\n")
    assert await runtime(argv, input="json").complete(request()) == reply


async def test_text_mode_does_not_unwrap_json(tmp_path: Path) -> None:
    argv = python_script(tmp_path, 'sys.stdout.write(\'{"text": "a"}\')\n')
    assert await runtime(argv).complete(request()) == '{"text": "a"}'


async def test_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HG_PASSED", "yes")
    monkeypatch.setenv("HG_NOT_PASSED", "secret")
    monkeypatch.setenv("HG_OVERRIDDEN", "from-os")
    argv = python_script(tmp_path, "sys.stdin.read()\nprint(json.dumps(dict(os.environ)))\n")
    rt = runtime(
        argv,
        passEnv=["HG_PASSED", "HG_OVERRIDDEN", "HG_ABSENT"],
        env={"HG_OVERRIDDEN": "from-env", "HG_EXTRA": "1", "HOOKGATE_RUN_ID": "spoofed"},
    )
    env = json.loads(await rt.complete(request()))
    env.pop("LC_CTYPE", None)  # the interpreter may add it on its own
    assert env == {
        "HG_PASSED": "yes",
        "HG_OVERRIDDEN": "from-env",
        "HG_EXTRA": "1",
        "HOOKGATE_RUN_KIND": "task",
        "HOOKGATE_AGENT_ID": "ops",
        "HOOKGATE_SESSION_KEY": "hook:deploy",
        "HOOKGATE_RUN_ID": "run-42",
        "HOOKGATE_MODEL": "local-1",
        "HOOKGATE_THINKING": "high",
    }


async def test_environment_defaults_for_model_and_thinking(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, 'cat >/dev/null\necho "[$HOOKGATE_MODEL] [$HOOKGATE_THINKING]"\n')
    assert await runtime(argv).complete(request(model=None, thinking=None)) == "[] [off]"
    assert await runtime(argv, model="m2").complete(request(model=None)) == "[m2] [high]"


async def test_cwd(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = shell_script(tmp_path, "pwd\n")
    assert await runtime(argv, cwd=str(work)).complete(request()) == str(work)


async def test_exit_code_error(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, "cat >/dev/null\necho partial\nexit 3\n")
    with pytest.raises(AgentRuntimeError) as info:
        await runtime(argv).complete(request())
    assert (info.value.message, info.value.retryable) == ("command exited with code 3", False)


async def test_command_not_reading_stdin(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, "echo ignored input\n")
    big = "x" * 1_000_000  # more than a pipe buffer
    assert await runtime(argv).complete(request(prompt=big)) == "ignored input"


async def test_large_input_and_output_round_trip(tmp_path: Path) -> None:
    argv = shell_script(tmp_path, "cat\n")
    text = "y" * 1_000_000
    assert await runtime(argv).complete(request(prompt=text)) == text


async def test_output_cap_kills_the_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    argv = python_script(
        tmp_path,
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "chunk = 'z' * 65536\n"
        "while True:\n    sys.stdout.write(chunk)\n    sys.stdout.flush()\n",
    )
    start = time.monotonic()
    with pytest.raises(AgentRuntimeError) as info:
        await runtime(argv).complete(request())
    assert (info.value.message, info.value.retryable) == ("command output exceeded 1048576 bytes", False)
    assert time.monotonic() - start < 5
    assert not _alive(int(pid_file.read_text()))


async def test_output_of_exactly_one_mebibyte_is_fine(tmp_path: Path) -> None:
    argv = python_script(tmp_path, "sys.stdout.write('a' * 1048576)\n")
    assert len(await runtime(argv).complete(request())) == 1_048_576


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent is not us counts as gone: only init can reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z" or int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()


async def _wait_for(path: Path, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.02)


def cooperative_script(tmp_path: Path, marks: Path) -> list[str]:
    """A command that writes ``pid <n>`` to ``marks``, then loops; on SIGTERM it writes ``term`` and exits 0."""
    return python_script(
        tmp_path,
        f"""
def on_term(signum, frame):
    open({str(marks)!r}, 'a').write('term\\n')
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open({str(marks)!r}, 'a').write(f'pid {{os.getpid()}}\\n')
while True:
    time.sleep(0.05)
""",
    )


async def test_a_child_left_holding_stdout_does_not_hold_the_run(tmp_path: Path) -> None:
    """The command prints its reply and exits 0, leaving `sleep 60 &` with its stdout: the run waited
    for the pipe's end until its timeout (`timed_out`). Now stdout gets a second after the exit;
    the reply is what was read, and the straggler goes with the rest of the process group."""
    pid_file = tmp_path / "child.pid"
    argv = shell_script(tmp_path, f'printf "done"\nsleep 60 &\necho $! > {pid_file}\n')
    start = time.monotonic()
    assert await runtime(argv).complete(request()) == "done"
    assert time.monotonic() - start < 5
    child = int(pid_file.read_text())
    assert await _gone(child), "the background child still runs"


async def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_cancellation_terminates_a_cooperative_process(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    argv = cooperative_script(tmp_path, marks)
    task = asyncio.create_task(runtime(argv).complete(request()))
    await _wait_for(marks)
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - start < 2
    lines = marks.read_text().split()
    assert lines[-1] == "term"
    assert not _alive(int(lines[1]))


async def test_cancellation_while_the_process_is_still_being_started_stops_it_cooperatively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child runs from the fork on, before asyncio has connected its pipes. A cancellation landing
    in that window (the parent's loop busy, the child fast) still goes SIGTERM first: under CPU load
    it hit 32 of 80 cancellations, and asyncio then SIGKILLed the leader alone. The window is held
    open here by a spawn that returns only once the test has cancelled."""
    marks = tmp_path / "marks"
    argv = cooperative_script(tmp_path, marks)
    real_spawn = asyncio.create_subprocess_exec
    cancelled = asyncio.Event()

    async def spawn_returning_late(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await real_spawn(*args, **kwargs)
        await cancelled.wait()
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_returning_late)
    task = asyncio.create_task(runtime(argv).complete(request()))
    await _wait_for(marks)
    pid = int(marks.read_text().split()[1])
    try:
        task.cancel()
        await asyncio.sleep(0.05)
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert marks.read_text().split()[-1] == "term"
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, 9)


async def test_cancellation_kills_after_grace_when_term_is_ignored(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    child_pid = tmp_path / "child"
    argv = shell_script(
        tmp_path,
        f"""
trap 'echo term >> {marks}' TERM
sleep 60 &
echo $! > {child_pid}
echo "pid $$" >> {marks}
while :; do sleep 0.1; done
""",
    )
    task = asyncio.create_task(runtime(argv).complete(request()))
    await _wait_for(child_pid)
    await _wait_for(marks)
    start = time.monotonic()
    task.cancel()  # what the worker's run timeout does
    with pytest.raises(asyncio.CancelledError):
        await task
    elapsed = time.monotonic() - start
    assert 4.9 <= elapsed < 9, elapsed  # SIGTERM ignored, SIGKILL 5 s later (slack for a loaded machine)
    lines = marks.read_text().split()
    assert lines[0] == "pid" and "term" in lines
    assert not _alive(int(lines[1]))  # reaped: no zombie
    assert not _alive(int(child_pid.read_text()))  # the whole process group went


async def test_missing_command_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(AgentRuntimeError) as info:
        await runtime([str(tmp_path / "gone")]).complete(request())
    assert info.value.message == "command could not start: No such file or directory"


def test_preflight(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    assert preflight(AgentSettings(id="ops", runtime={"kind": "command", "command": [missing]})) == (
        f"runtime command not found: {missing}"
    )
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\n")
    assert preflight(AgentSettings(id="ops", runtime={"kind": "command", "command": [str(plain)]})) == (
        f"runtime command not executable: {plain}"
    )


async def test_a_process_that_left_the_group_does_not_hold_a_cancelled_run(tmp_path: Path) -> None:
    """`setsid sleep 45 &` keeps stdout but is out of the group's signals: a run past its timeout
    waited for it (45 s, holding a run slot; forever for one that never ends). Now our end of the
    pipe is closed a second after the group is gone."""
    pid_file = tmp_path / "escaped.pid"
    argv = shell_script(tmp_path, f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 45' &\nexec sleep 3600\n")
    rt = runtime(argv)
    task = asyncio.create_task(rt.complete(request()))
    await _wait_for(pid_file)
    escaped = int(pid_file.read_text())
    fds_before = len(os.listdir("/proc/self/fd"))
    start = time.monotonic()
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)
        assert time.monotonic() - start < rt.kill_grace + rt.exit_drain_seconds + 3
        assert len(os.listdir("/proc/self/fd")) < fds_before  # the pipe's end is ours no longer
    finally:
        os.kill(escaped, 9)


async def test_a_command_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    argv = python_script(tmp_path, f"open({str(marks)!r}, 'w').write(f'pid {{os.getpid()}}\\n')\ntime.sleep(30)\n")
    task = asyncio.create_task(runtime(argv).complete(request()))
    await _wait_for(marks)
    os.kill(int(marks.read_text().split()[1]), 15)
    with pytest.raises(AgentRuntimeError) as info:
        await task
    assert (info.value.message, info.value.signal) == ("command exited with code -15", 15)
