"""The ``command`` runtime (model.md §8): one local process per attempt, no shell.

The argv runs in its own session (process group) with the environment ``passEnv`` (copied from ours)
+ ``env`` + the ``HOOKGATE_*`` variables, in ``cwd``; stderr is discarded. Input ``text`` writes the
prompt to stdin, ``json`` writes one JSON object (``json_input``). The reply is stdout (UTF-8) minus
trailing newlines; in ``json`` mode a stdout that is a JSON object with a string ``text`` uses it.

Errors (never retryable): exit status ≠ 0 → ``command exited with code <n>`` (a negative ``n`` is
the signal that ended it); more than 1 MiB of stdout → ``command output exceeded 1048576 bytes``
(the process group is killed at once). Cancelling the call (the run timeout) sends SIGTERM to the
process group, SIGKILL after 5 s, and reaps the process before the cancellation propagates. Once the
command has exited, stdout has 1 s to end; a child still holding it then (``sleep 60 &``) is killed
with the rest of the group, and what was read is the reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import msgspec

from hookgate.agents.base import (
    COMMAND_EXIT_DRAIN_SECONDS,
    COMMAND_KILL_GRACE_SECONDS,
    COMMAND_OUTPUT_MAX_BYTES,
    COMMAND_PROTOCOL_VERSION,
    AgentRuntimeError,
    RuntimeRequest,
    configured_model_id,
)
from hookgate.config.modelrefs import runtime_provider
from hookgate.jsonbody import InvalidJSON, decode_answer

_READ_CHUNK = 65_536


class _OutputTooLarge(Exception):
    pass


def json_input(request: RuntimeRequest, model: str | None) -> bytes:
    """The ``json`` input document (model.md §8)."""
    messages = [{"role": role, "content": content} for role, content in request.history]
    messages.append({"role": "user", "content": request.prompt})
    return msgspec.json.encode(
        {
            "protocolVersion": COMMAND_PROTOCOL_VERSION,
            "kind": request.run_kind,
            "agentId": request.agent_id,
            "sessionKey": request.session_key,
            "runId": request.run_id,
            "model": model,
            "thinking": request.thinking,
            "system": request.system_prompt,
            "messages": messages,
        }
    )


def parse_reply(stdout: bytes, input_mode: str) -> str:
    """stdout as the reply: decoded, trailing newlines removed, ``{"text": …}`` unwrapped in json mode."""
    text = stdout.decode("utf-8", errors="replace").rstrip("\r\n")
    if input_mode == "json" and text.lstrip().startswith("{"):
        try:
            doc = decode_answer(text)
        except InvalidJSON:
            return text
        if isinstance(doc, dict) and isinstance(doc.get("text"), str):
            return str(doc["text"])
    return text


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


_EXIT_POLL_SECONDS = 0.1  # how often a running command is checked for having exited


async def _discard(stream: asyncio.StreamReader | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(Exception):
        while await stream.read(_READ_CHUNK):
            pass


async def stop_process(proc: asyncio.subprocess.Process, grace: float = COMMAND_KILL_GRACE_SECONDS,
                       straggler_wait: float = COMMAND_EXIT_DRAIN_SECONDS) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, and reap the process.

    Unread stdout is drained meanwhile: asyncio reaps a process only once its pipes are closed, and
    a full, paused pipe would never see its end. A process that left the group (``setsid``) and still
    holds stdout is out of the signals' reach: after ``straggler_wait`` our end of the pipe is closed
    (the run waited for it, past its timeout, and held a run slot until that process ended).
    """
    if proc.stdin is not None:
        proc.stdin.close()
    drain = asyncio.create_task(_discard(proc.stdout))
    try:
        if proc.returncode is None:
            _signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
    finally:
        # Also when cancelled again while waiting. Stragglers (the leader gone, a child still
        # holding stdout) go too, so the pipes close.
        _signal_group(proc, signal.SIGKILL)
        try:
            await proc.wait()
            await asyncio.wait({drain}, timeout=straggler_wait)
        finally:
            drain.cancel()
            _close_stdout(proc)
            _LIVE_GROUPS.discard(proc.pid)


def _close_stdout(proc: asyncio.subprocess.Process) -> None:
    """Our end of the command's stdout closed: a process that escaped its group may still hold the
    other end, and the descriptor stayed open (one per such run) until that process ended."""
    transport = getattr(proc, "_transport", None)
    pipe = transport.get_pipe_transport(1) if transport is not None else None
    if pipe is not None:
        pipe.close()


# The process groups of the commands running now (their leaders' pids): a second stop signal exits at
# once, and kills them first: left running, a run's command would run again beside itself after the
# restart.
_LIVE_GROUPS: set[int] = set()


def kill_running_commands() -> None:
    for pgid in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


async def _feed(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    if stdin is None:
        return
    try:
        stdin.write(data)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command did not read its input; its exit status tells the rest
    finally:
        stdin.close()


async def _read_capped(stdout: asyncio.StreamReader | None, limit: int, chunks: list[bytes]) -> None:
    """stdout until its end into ``chunks`` (what was read stays there if this is cancelled)."""
    if stdout is None:
        return
    size = 0
    while chunk := await stdout.read(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise _OutputTooLarge
        chunks.append(chunk)


class CommandRuntime:
    kind = "command"

    def __init__(self, config: dict[str, Any]) -> None:
        self.provider = runtime_provider(config)
        self.default_model = configured_model_id(config, self.provider)
        self.argv = [str(a) for a in config.get("command") or []]
        self.input_mode = str(config.get("input") or "text")
        self.env = {str(k): str(v) for k, v in (config.get("env") or {}).items()}
        self.pass_env = [str(n) for n in config.get("passEnv") or []]
        cwd = config.get("cwd")
        self.cwd = str(cwd) if cwd else None
        self.output_limit = COMMAND_OUTPUT_MAX_BYTES
        self.kill_grace = COMMAND_KILL_GRACE_SECONDS
        self.exit_drain_seconds = COMMAND_EXIT_DRAIN_SECONDS

    def environment(self, request: RuntimeRequest) -> dict[str, str]:
        env = {name: os.environ[name] for name in self.pass_env if name in os.environ}
        env.update(self.env)
        env.update(
            {
                "HOOKGATE_RUN_KIND": request.run_kind,
                "HOOKGATE_AGENT_ID": request.agent_id,
                "HOOKGATE_SESSION_KEY": request.session_key,
                "HOOKGATE_RUN_ID": request.run_id,
                "HOOKGATE_MODEL": request.model or self.default_model or "",
                "HOOKGATE_THINKING": request.thinking or "off",
            }
        )
        return env

    def stdin_bytes(self, request: RuntimeRequest) -> bytes:
        if self.input_mode == "json":
            return json_input(request, request.model or self.default_model)
        return request.prompt.encode("utf-8")

    async def complete(self, request: RuntimeRequest) -> str:
        if not self.argv:
            raise AgentRuntimeError("command runtime: no command configured")
        # The process runs from the fork on, before its pipes are connected. A cancellation in that
        # window (the run timeout, shutdown) would make asyncio SIGKILL the leader alone: the spawn
        # is shielded, so a cancelled call still stops the whole group the cooperative way.
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=self.environment(request),
            cwd=self.cwd,
            start_new_session=True,
        ))
        try:
            proc = await asyncio.shield(spawn)
        except OSError as exc:
            raise AgentRuntimeError(f"command could not start: {exc.strerror or exc}") from None
        except asyncio.CancelledError:
            with contextlib.suppress(OSError):
                await stop_process(await spawn, grace=self.kill_grace, straggler_wait=self.exit_drain_seconds)
            raise
        _LIVE_GROUPS.add(proc.pid)
        try:
            stdout = await self._communicate(proc, self.stdin_bytes(request))
        except _OutputTooLarge:
            await stop_process(proc, grace=0, straggler_wait=self.exit_drain_seconds)
            raise AgentRuntimeError(f"command output exceeded {self.output_limit} bytes") from None
        except BaseException:
            await stop_process(proc, grace=self.kill_grace, straggler_wait=self.exit_drain_seconds)
            raise
        finally:
            _LIVE_GROUPS.discard(proc.pid)
        if proc.returncode != 0:
            code = proc.returncode
            raise AgentRuntimeError(f"command exited with code {code}",
                                    signal=-code if code is not None and code < 0 else None)
        return parse_reply(stdout, self.input_mode)

    async def _communicate(self, proc: asyncio.subprocess.Process, data: bytes) -> bytes:
        """Feed stdin, read stdout to its end, reap the process. A command that exits while a child it
        started (``sleep 60 &``) still holds stdout would keep the pipe open, and the run waiting,
        until the run's timeout: once the command has exited, stdout gets ``exit_drain_seconds`` to
        end, then what was read is the reply and the stragglers of its process group are killed."""
        writer = asyncio.create_task(_feed(proc.stdin, data))
        chunks: list[bytes] = []
        reader = asyncio.create_task(_read_capped(proc.stdout, self.output_limit, chunks))
        try:
            exited_at: float | None = None
            while not reader.done():
                await asyncio.wait({reader}, timeout=_EXIT_POLL_SECONDS)
                if reader.done() or proc.returncode is None:
                    continue
                now = asyncio.get_running_loop().time()
                if exited_at is None:
                    exited_at = now
                elif now - exited_at >= self.exit_drain_seconds:
                    reader.cancel()
                    _signal_group(proc, signal.SIGKILL)  # the stragglers: their pipe ends close
                    await asyncio.gather(reader, return_exceptions=True)
                    _close_stdout(proc)  # and ours, for one that left the group (``setsid``)
                    break
            if not reader.cancelled():
                reader.result()  # _OutputTooLarge, or the reader's own failure
            await proc.wait()
            return b"".join(chunks)
        finally:
            for task in (reader, writer):
                if not task.done():
                    task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)

    async def aclose(self) -> None:
        return None
