"""The ``hookgate`` command line (operations.md §1): thin commands over the same services."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from hookgate import __version__
from hookgate.config.loader import load_settings, locate_config, valid_bind
from hookgate.config.names import normalize_agent_id, normalize_channel_name
from hookgate.config.render import redacted_effective, summary_line
from hookgate.config.secrets import unresolved_secret_warnings
from hookgate.config.settings import HooksSettings, Settings
from hookgate.errors import ConfigError, HookgateError, StoreUnavailable
from hookgate.obs import logging as obs_logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
_DURATION = re.compile(r"([0-9]+)([smhd])")  # ASCII digits: \d took "٣m" as 3 minutes
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MAX_DURATION_S = 36500 * 86400  # a century, as storage.retention.*Days; more reaches past any record


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after the subcommand (operations.md §1)."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument("--version", action="version", version=f"hookgate {__version__}")
    parser.add_argument("--config", metavar="PATH", default=default, help="config file (README §4)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        default=default if suppress else "info")
    parser.add_argument("--log-format", choices=["json", "console"], default=default)


def _int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer option between ``lo`` and ``hi``; argparse turns the error into exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}" if hi is not None
                                             else f"must be at least {lo}")
        return value

    return parse


_limit = _int_in(1, 2**63 - 1)  # SQLite's integers
_port = _int_in(0, 65535)  # the same rule as gateway.port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hookgate", description="Self-hosted webhook ingress for AI assistants.")
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", parents=[common], help="run the HTTP server and the embedded worker")
    serve.add_argument("--bind", metavar="ADDR", type=_bind)
    serve.add_argument("--port", type=_port, metavar="N")
    serve.add_argument("--no-worker", action="store_true", help="HTTP only")

    sub.add_parser("worker", parents=[common], help="the job worker without HTTP (PostgreSQL only)")

    config = sub.add_parser("config", parents=[common], help="check or show the configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="check|show", required=True)
    config_sub.add_parser("check", parents=[common], help="validate the configuration")
    config_sub.add_parser("show", parents=[common], help="print the effective configuration")

    runs = sub.add_parser("runs", parents=[common], help="inspect agent runs")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="list|show", required=True)
    runs_list = runs_sub.add_parser("list", parents=[common])
    runs_list.add_argument("--agent", type=normalize_agent_id)
    runs_list.add_argument("--kind", choices=["hook", "task", "heartbeat"])
    runs_list.add_argument("--status", action="append", default=[], type=_run_status)
    runs_list.add_argument("--since", metavar="DURATION", type=_duration)
    runs_list.add_argument("--limit", type=_limit, default=50)
    runs_list.add_argument("--json", action="store_true")
    runs_show = runs_sub.add_parser("show", parents=[common])
    runs_show.add_argument("run_id")
    runs_show.add_argument("--content", action="store_true", help="show message, prompt and reply")

    flows = sub.add_parser("flows", parents=[common], help="inspect TaskFlows")
    flows_sub = flows.add_subparsers(dest="flows_command", metavar="list|show", required=True)
    flows_list = flows_sub.add_parser("list", parents=[common])
    flows_list.add_argument("--session", metavar="KEY")
    flows_list.add_argument("--route", metavar="ROUTE_ID")  # both: flows of that session, if it is the route's
    flows_list.add_argument("--status", action="append", default=[], type=_flow_status)
    flows_list.add_argument("--limit", type=_limit, default=50)
    flows_list.add_argument("--json", action="store_true")
    flows_show = flows_sub.add_parser("show", parents=[common])
    flows_show.add_argument("flow_id")
    flows_show.add_argument("--json", action="store_true")

    events = sub.add_parser("events", parents=[common], help="inspect system events")
    events_sub = events.add_subparsers(dest="events_command", metavar="list", required=True)
    events_list = events_sub.add_parser("list", parents=[common])
    events_list.add_argument("--agent", type=normalize_agent_id)
    events_list.add_argument("--status", choices=["pending", "consumed", "dropped", "all"], default="pending")
    events_list.add_argument("--limit", type=_limit, default=50)
    events_list.add_argument("--json", action="store_true")

    hooks = sub.add_parser("hooks", parents=[common], help="try a hook request without dispatching it")
    hooks_sub = hooks.add_subparsers(dest="hooks_command", metavar="test", required=True)
    hooks_test = hooks_sub.add_parser("test", parents=[common])
    hooks_test.add_argument("name", help="the subPath: a mapping path, wake or agent")
    hooks_test.add_argument("--payload", required=True, metavar="FILE|-")
    hooks_test.add_argument("--header", action="append", default=[], metavar="'Name: value'")
    hooks_test.add_argument("--query", action="append", default=[], metavar="key=value")
    hooks_test.add_argument("--prompt", action="store_true", help="also print the run prompt")

    replay = sub.add_parser("replay", parents=[common], help="re-queue dead deliveries or re-run a hook run")
    replay_sub = replay.add_subparsers(dest="replay_command", metavar="delivery|deliveries|run", required=True)
    replay_one = replay_sub.add_parser("delivery", parents=[common], help="re-queue one dead delivery")
    replay_one.add_argument("delivery_id")
    replay_many = replay_sub.add_parser("deliveries", parents=[common], help="re-queue matching dead deliveries")
    replay_many.add_argument("--dead", action="store_true", required=True, help="dead deliveries (required)")
    replay_many.add_argument("--channel")
    replay_many.add_argument("--since", type=_duration, help="dead-lettered within this duration (30m, 2h, 7d)")
    replay_many.add_argument("--dry-run", action="store_true")
    replay_run = replay_sub.add_parser("run", parents=[common], help="enqueue a terminal hook run again")
    replay_run.add_argument("run_id")

    secrets_p = sub.add_parser("secrets", parents=[common], help="resolve every secret input")
    secrets_sub = secrets_p.add_subparsers(dest="secrets_command", metavar="check", required=True)
    secrets_sub.add_parser("check", parents=[common])

    token = sub.add_parser("token", parents=[common], help="generate a random token")
    token_sub = token.add_subparsers(dest="token_command", metavar="generate", required=True)
    generate = token_sub.add_parser("generate", parents=[common])
    generate.add_argument("--bytes", type=int, default=32, dest="nbytes")
    return parser


def _duration(value: str) -> int:
    match = _DURATION.fullmatch(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {value!r} (use e.g. 30s, 15m, 2h, 7d)")
    digits = match.group(1).lstrip("0") or "0"
    # more digits than any duration within the bound has (and than int() converts past 4 300)
    seconds = int(digits) * _UNIT_SECONDS[match.group(2)] if len(digits) <= 12 else _MAX_DURATION_S + 1
    if seconds > _MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"duration {value!r} is too long (at most 36500d)")
    return seconds


def _bind(value: str) -> str:
    """--bind gets gateway.bind's check: an IP address or a host name ("" would listen everywhere)."""
    if not valid_bind(value):
        raise argparse.ArgumentTypeError(f'invalid address "{value}" (an IP address or a host name)')
    return value


def _run_status(value: str) -> str:
    from hookgate.store.base import RUN_STATUSES  # imported when used: `token generate` needs no store

    return _one_of(value, RUN_STATUSES)


def _flow_status(value: str) -> str:
    from hookgate.flows.model import FLOW_STATUSES

    return _one_of(value, FLOW_STATUSES)


def _one_of(value: str, allowed: Sequence[str]) -> str:
    """A status filter: a typo is a usage error (exit 2), not an empty list."""
    if value not in allowed:
        raise argparse.ArgumentTypeError(f"invalid status {value!r} (one of {', '.join(allowed)})")
    return value


def _load(args: argparse.Namespace) -> Settings:
    path = locate_config(args.config, os.environ, os.getcwd())
    return load_settings(path, os.environ, cwd=os.getcwd())


def _one_line(text: str) -> str:
    """A config message as one line: a control character (a provider's message, a NUL in a path)
    becomes a space, so no text can end a line and forge another ``error:`` line."""
    return "".join(c if c.isprintable() else " " for c in text)


def _complain(text: str) -> None:
    """An error for stderr on one line: it may repeat what the operator typed (an id, a path)."""
    print(_one_line(text), file=sys.stderr)


def _print_config_errors(exc: ConfigError) -> None:
    for line in exc.lines:
        _complain(f"error: {line}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    _reserve_standard_fds()
    obs_logging.configure(args.log_level or "info", args.log_format)
    handler = _COMMANDS[args.command]
    # a command's output; not a server's (its console channel handles its own write errors), nor a
    # closed stdout (None: print writes nothing)
    guarded = _GuardedOutput(sys.stdout) if sys.stdout is not None and args.command not in ("serve", "worker") \
        else None
    if guarded is not None:
        sys.stdout = guarded
    try:
        status = handler(args)
        if guarded is not None:
            guarded.flush()  # inside the try: a full disk fails here, not in the interpreter's last flush
        elif sys.stdout is not None:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):  # a server's stdout gone or full: what it held is lost, no traceback
                _quiet_stdout()
        return status
    except _OutputFailed as exc:
        _quiet_stdout()
        _complain(f"error: cannot write the output: {exc.__cause__}")
        return EXIT_FAILED
    except ConfigError as exc:
        _print_config_errors(exc)
        return EXIT_USAGE
    except HookgateError as exc:
        # a store failure says what failed (SQLite's "database or disk is full"), not only that one did
        cause = f" ({exc.__cause__})" if isinstance(exc, StoreUnavailable) and exc.__cause__ is not None else ""
        _complain(f"error: {exc.message}{cause}")
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C: the shell's status for SIGINT, and no traceback for it
        _complain("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe or socket broke: that is an error worth its traceback
        _quiet_stdout()  # `hookgate config show | head`: the reader left; no traceback for that
        return EXIT_FAILED
    finally:
        obs_logging.flush()
        if guarded is not None and sys.stdout is guarded:
            sys.stdout = guarded.inner


class _OutputFailed(Exception):
    """Writing to stdout failed with something other than a gone reader (``flows list > /dev/full``)."""


class _GuardedOutput:
    """stdout, whose write errors are told apart from every other ``OSError`` of a command: a full
    disk or an I/O error there is one ``error:`` line, not a traceback. A broken pipe stays itself
    (``main`` handles it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def write(self, text: str) -> Any:
        return self._guarded(self.inner.write, text)

    def flush(self) -> None:
        self._guarded(self.inner.flush)

    @staticmethod
    def _guarded(call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputFailed from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports POLLERR on its write end)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # AttributeError: stdout closed at the start (None)
        return False


def _reserve_standard_fds() -> None:
    """A process started with stdin, stdout or stderr closed (``2>&-``) gets /dev/null there, before
    it opens anything: the lock file or a delivery file would otherwise take the free number, and a
    write meant for the terminal (a library's warning) would land in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
    if sys.stderr is None:  # (Python saw fd 2 closed) a print(file=sys.stderr) of None went to stdout
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's own, for its lifetime


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush would hit the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


_SI_KERNEL = 0x80  # siginfo's si_code for a signal the kernel raised (a terminal's Ctrl-C), not kill(2)


def _init_when_pid_1() -> None:
    """As PID 1 (a container started without ``--init``) the process is its namespace's init: every
    orphan is re-parented to it, and a command runtime's background child that outlived its command
    stayed a zombie for good, one per run, until the container's pid limit stopped all forking. So PID 1
    forks: the child is the gateway; PID 1 passes the signals sent to it on, reaps every process that
    ends, and exits as the gateway did. Returns in the gateway."""
    if os.getpid() != 1:
        return
    watched = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
               signal.SIGCHLD}
    # blocked before the fork: a gateway that ends at once (a config error) must not end before PID 1
    # listens, its SIGCHLD discarded and PID 1 waiting for good beside a zombie
    before = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    gateway = os.fork()
    if gateway == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return
    while True:
        info = signal.sigwaitinfo(watched)
        if info.si_signo != signal.SIGCHLD:
            # a terminal's Ctrl-C reaches the whole foreground group, the gateway too: passed on, it
            # would be the gateway's second signal (an immediate exit, not a drain)
            if info.si_code != _SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(gateway, info.si_signo)
            continue
        while True:  # SIGCHLDs coalesce: every child that has ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(EXIT_FAILED)
            if pid == 0:
                break
            if pid == gateway:
                code = os.waitstatus_to_exitcode(status)
                os._exit(code if code >= 0 else 128 - code)


def cmd_serve(args: argparse.Namespace) -> int:
    _init_when_pid_1()
    from hookgate.server import file_stamp, run_serve

    path = locate_config(args.config, os.environ, os.getcwd())
    cwd = os.getcwd()
    stamp = file_stamp(path) if path else None  # before the read: the watch's first baseline
    settings = load_settings(path, os.environ, cwd=cwd)
    status = run_serve(settings, lambda: load_settings(path, os.environ, cwd=cwd), bind=args.bind, port=args.port,
                       worker=not args.no_worker, read_stamp=stamp)
    _exit_past_foreign_threads(status)
    return status


def _exit_past_foreign_threads(status: int) -> None:
    """The server has stopped: a thread a transform started (not a daemon) would keep the process,
    which the interpreter's exit waits for, alive for good — after ``shutdown.completed``, and past
    a second SIGTERM (the loop that answered it is gone). Then the process exits here, as it would."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if not others:
        return
    obs_logging.get_logger().warning("shutdown.threads_left", count=len(others))
    obs_logging.flush(timeout=0.5)
    with contextlib.suppress(OSError, ValueError):
        if sys.stdout is not None:
            sys.stdout.flush()
    os._exit(status)


def cmd_worker(args: argparse.Namespace) -> int:
    """operations.md §1.2: a worker without HTTP needs a store several processes share (PostgreSQL)."""
    _load(args)  # a config error first; "postgres" itself is one in this build (POSTGRES_UNAVAILABLE)
    print('error: hookgate worker requires storage.backend "postgres"', file=sys.stderr)
    return EXIT_USAGE


def cmd_config(args: argparse.Namespace) -> int:
    if args.config_command == "check":
        path = locate_config(args.config, os.environ, os.getcwd())
        settings: Settings | None = None
        hooks: HooksSettings | None
        config_dir: str | None
        try:
            settings = load_settings(path, os.environ, cwd=os.getcwd())
            errors, warnings, hooks, config_dir = [], settings.warnings, settings.hooks, settings.config_dir
        except ConfigError as exc:  # the transforms are still imported when the hooks could be built
            errors, warnings, hooks, config_dir = exc.lines, exc.warnings, exc.hooks, exc.config_dir
        if hooks is not None and config_dir is not None:
            errors = [*errors, *_transform_import_errors(hooks, config_dir)]
        for warning in [*warnings, *(unresolved_secret_warnings(settings) if settings is not None else [])]:
            print(f"warning: {_one_line(warning)}")
        for line in errors:
            _complain(f"error: {line}")
        if errors or settings is None:
            return EXIT_USAGE
        print(f"config OK: {settings.config_path or '(no file: empty config)'}")
        print(summary_line(settings))
        return EXIT_OK
    settings = _load(args)
    shown = dict(redacted_effective(settings))
    shown["configHash"] = settings.config_hash
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    return EXIT_OK


def _transform_import_errors(hooks: HooksSettings, config_dir: str) -> list[str]:
    """Import every existing transform module (hooks.md §6.6); one line per failure."""
    from hookgate.config.paths import transforms_root
    from hookgate.hooks.transforms_loader import TransformFailed, TransformLoader

    loader = TransformLoader()
    errors: list[str] = []
    root = transforms_root(config_dir)
    for m in hooks.mappings:
        if m.transform_module is None or not os.path.exists(m.transform_module):
            continue  # a missing file is already a warning
        try:
            loader.load(m, hooks.transforms_dir, root)
        except TransformFailed as exc:
            errors.append(f"hooks.mappings[{m.index}].transform.module: {exc.kind}: {exc.detail}")
    return errors


def cmd_hooks(args: argparse.Namespace) -> int:
    from hookgate.hooks.mappings import hook_test

    settings = _load(args)
    if args.payload == "-":
        body = sys.stdin.buffer.read()
    else:
        try:
            with open(args.payload, "rb") as fh:
                body = fh.read()
        except OSError as exc:
            _complain(f"error: cannot read --payload {args.payload}: {exc.strerror or exc}")
            return EXIT_USAGE
    headers: list[tuple[str, str]] = []
    for item in args.header:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            _complain(f"error: --header must look like 'Name: value': {item}")
            return EXIT_USAGE
        headers.append((name.strip(), value.strip(" \t")))  # as a server reads a field value (RFC 9110 §5.5)
    query: list[tuple[str, str]] = []
    for item in args.query:
        key, sep, value = item.partition("=")
        if not sep:
            _complain(f"error: --query must look like key=value: {item}")
            return EXIT_USAGE
        query.append((key, value))
    result = asyncio.run(hook_test(settings, args.name, body, headers, query, prompt=args.prompt))
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return EXIT_OK if 200 <= int(result["status"]) < 300 else EXIT_FAILED


def cmd_secrets(args: argparse.Namespace) -> int:
    """One ``OK``/``ERROR`` line per secret input. A config that is invalid only because secrets do not
    resolve still gets its lines (exit 1); any other config error is reported as such (exit 2)."""
    try:
        inputs = _load(args).secret_inputs
        other_errors: list[str] = []
    except ConfigError as exc:
        if not exc.secret_inputs:
            raise
        inputs = exc.secret_inputs
        unresolved = tuple(f"{item.key_path}: " for item in inputs if item.value is None)
        other_errors = [line for line in exc.lines if not line.startswith(unresolved)]
    failed = False
    for item in inputs:
        if item.value is not None:
            print(f"OK {item.key_path} {item.source}")
        else:
            failed = True
            print(f"ERROR {item.key_path} {item.source} {item.error}")
    if other_errors:
        _print_config_errors(ConfigError(other_errors))
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def cmd_token(args: argparse.Namespace) -> int:
    if not 16 <= args.nbytes <= 64:
        print("error: --bytes must be between 16 and 64", file=sys.stderr)
        return EXIT_USAGE
    print(base64.urlsafe_b64encode(secrets.token_bytes(args.nbytes)).rstrip(b"=").decode())
    return EXIT_OK


def _with_store(settings: Settings, fn: Callable[[Any], Awaitable[int]], *, read_only: bool = False) -> int:
    """``fn(store)`` on the configured store; ``read_only``: the command only reads, so it neither
    creates, migrates nor otherwise changes the database (role ``read``)."""
    from hookgate.store import open_store

    async def go() -> int:
        store = open_store(settings.storage)
        await store.open("read" if read_only else "cli")
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _table(header: list[str], rows: list[list[str]]) -> str:
    # cells hold untrusted text (an event's text, a flow's goal): no control character reaches the
    # operator's terminal, and a tab or newline cannot break the columns
    rows = [[_UNPRINTABLE.sub(" ", cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _record(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else dict(obj)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _content_digest(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    data = text.encode("utf-8")
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()[:16]}


def run_view(run: Any, content: bool, transcript: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A run record for `runs show`: message, prompt and reply digested unless ``content``."""
    raw = _record(run)
    view = {_camel(k): v for k, v in raw.items()}
    if transcript is not None:
        view["prompt"] = next((text for role, text in transcript if role == "user"), None)
        view["durationMs"] = (run.ended_at - run.started_at) if run.started_at and run.ended_at else None
    inputs = dict(view.get("inputs") or {})
    for holder, key in ((inputs, "message"), (view, "prompt"), (view, "reply")):
        if key in holder and holder[key] is not None and not content:
            holder[key] = _content_digest(holder[key])
    if "inputs" in view:
        view["inputs"] = inputs
    return view


def cmd_runs(args: argparse.Namespace) -> int:
    settings = _load(args)

    async def go(store: Any) -> int:
        if args.runs_command == "show":
            run = await store.get_run(args.run_id)
            if run is None:
                _complain(f"run {args.run_id} not found")
                return EXIT_FAILED
            transcript = await store.flow_read(lambda tx: tx.run_transcript(args.run_id))
            view = run_view(run, args.content, transcript)
            view["deliveries"] = await store.flow_read(lambda tx: tx.run_deliveries(args.run_id))
            print(json.dumps(view, indent=2, ensure_ascii=False))
            return EXIT_OK
        since = None if args.since is None else int(time.time() * 1000) - args.since * 1000
        runs = await store.list_runs(agent_id=args.agent, kind=args.kind, statuses=tuple(args.status),
                                     since_ms=since, limit=args.limit)
        if args.json:
            print(json.dumps([run_view(r, False) for r in runs], indent=2, ensure_ascii=False))
            return EXIT_OK
        rows = []
        for r in runs:
            duration = "-"
            if r.started_at is not None and r.ended_at is not None:
                duration = f"{(r.ended_at - r.started_at) / 1000:.1f}s"
            rows.append([r.run_id, r.kind, r.agent_id, r.status, str(r.attempt), _iso(r.created_at), duration,
                         obs_logging.clean_text(r.name or "", 60)])
        print(_table(["RUN ID", "KIND", "AGENT", "STATUS", "ATTEMPT", "CREATED", "DURATION", "NAME"], rows))
        return EXIT_OK

    return _with_store(settings, go, read_only=True)


def cmd_events(args: argparse.Namespace) -> int:
    settings = _load(args)

    async def go(store: Any) -> int:
        events = await store.list_events(agent_id=args.agent, status=args.status, limit=args.limit)
        if args.json:
            print(json.dumps([{_camel(k): v for k, v in _record(e).items()} for e in events], indent=2,
                             ensure_ascii=False))
            return EXIT_OK
        rows = [
            [str(e.seq), e.session_key, e.status, _iso(e.created_at), (e.text.splitlines() or [""])[0][:80]]
            for e in events
        ]
        print(_table(["SEQ", "SESSION", "STATUS", "CREATED", "TEXT"], rows))
        return EXIT_OK

    return _with_store(settings, go, read_only=True)


def cmd_flows(args: argparse.Namespace) -> int:
    from hookgate.flows.views import flow_view, summary, task_view

    settings = _load(args)

    async def go(store: Any) -> int:
        if args.flows_command == "show":
            def read(tx: Any) -> Any:
                flow = tx.admin_get_flow(args.flow_id)
                return (flow, tx.list_tasks(flow.flow_id)) if flow is not None else None

            found = await store.flow_read(read)
            if found is None:
                _complain(f"flow {args.flow_id} not found")
                return EXIT_FAILED
            flow, tasks = found
            shown = {"flow": {**flow_view(flow), "ownerKey": flow.owner_key},
                     "tasks": [task_view(t) for t in tasks], "summary": summary(tasks)}
            print(json.dumps(shown, indent=2, ensure_ascii=False))
            return EXIT_OK
        owners = {args.session.strip().lower()} if args.session is not None else set()  # "" matches no flow
        if args.route is not None:
            route = next((r for r in settings.webhooks.routes if r.id == args.route), None)
            if route is None:
                _complain(f"route {args.route} not found")
                return EXIT_FAILED
            owners.add(route.session_key)
        flows: list[Any] = []  # --session and --route combine: no flow has two owners
        if len(owners) <= 1:
            owner = next(iter(owners), None)
            flows = await store.flow_read(lambda tx: tx.admin_list_flows(owner, tuple(args.status), args.limit))
        if args.json:
            print(json.dumps([flow_view(f) for f in flows], indent=2, ensure_ascii=False))
            return EXIT_OK
        rows = [[f.flow_id, f.status, str(f.revision), _iso(f.updated_at), obs_logging.clean_text(f.goal, 60)]
                for f in flows]
        print(_table(["FLOW ID", "STATUS", "REV", "UPDATED", "GOAL"], rows))
        return EXIT_OK

    return _with_store(settings, go, read_only=True)


TERMINAL_RUN_STATUSES = ("ok", "error", "timed_out", "skipped", "lost", "cancelled")


def cmd_replay(args: argparse.Namespace) -> int:
    """operations.md §1.10: dead deliveries back to pending (attempts reset), or a hook run again."""
    settings = _load(args)
    now = int(time.time() * 1000)

    async def go(store: Any) -> int:
        if args.replay_command == "delivery":
            def requeue_one(tx: Any) -> str | None:
                status = tx.delivery_status(args.delivery_id)
                if status == "dead":
                    tx.requeue_delivery(args.delivery_id, now)
                return status  # type: ignore[no-any-return]

            status = await store.flow_write(requeue_one)
            if status is None:
                _complain(f"delivery {args.delivery_id} not found")
                return EXIT_FAILED
            if status != "dead":
                _complain(f"delivery {args.delivery_id} is {status}; only dead deliveries can be replayed")
                return EXIT_FAILED
            print(f"requeued delivery {args.delivery_id}")
            return EXIT_OK
        if args.replay_command == "deliveries":
            since = None if args.since is None else now - args.since * 1000

            channel = None if args.channel is None else normalize_channel_name(args.channel)  # `teams` too

            def requeue_many(tx: Any) -> int:
                ids = tx.dead_deliveries(channel, since)
                if not args.dry_run:
                    for delivery_id in ids:
                        tx.requeue_delivery(delivery_id, now)
                return len(ids)

            n = await (store.flow_read(requeue_many) if args.dry_run else store.flow_write(requeue_many))
            print(f"{'would requeue' if args.dry_run else 'requeued'} {n} deliveries")
            return EXIT_OK
        run = await store.get_run(args.run_id)
        if run is None:
            _complain(f"run {args.run_id} not found")
            return EXIT_FAILED
        if run.kind != "hook" or run.status not in TERMINAL_RUN_STATUSES:
            what = f"a {run.kind} run" if run.kind != "hook" else f"{run.status}"
            _complain(f"run {args.run_id} is {what}; only terminal hook runs can be replayed")
            return EXIT_FAILED
        from hookgate.store.base import NewRun

        new = NewRun(run_id=None, kind="hook", agent_id=run.agent_id, session_key=run.session_key,
                     name=run.name, inputs=dict(run.inputs), created_at=now)
        replayed = await store.enqueue_hook_run(new, None)
        print(f"replayed run {run.run_id} as {replayed.run_id}")
        return EXIT_OK

    return _with_store(settings, go, read_only=args.replay_command == "deliveries" and args.dry_run)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "replay": cmd_replay,
    "serve": cmd_serve,
    "config": cmd_config,
    "runs": cmd_runs,
    "flows": cmd_flows,
    "events": cmd_events,
    "secrets": cmd_secrets,
    "hooks": cmd_hooks,
    "token": cmd_token,
    "worker": cmd_worker,
}


if __name__ == "__main__":
    sys.exit(main())
