"""SecretRef resolution (webhooks.md §1.3): env, file and exec providers, one pass per (re)load.

Synchronous: it runs at startup and on reload, outside the event loop. Providers are resolved
concurrently (``secrets.resolution.maxProviderConcurrency``), all refs of one provider in one
call. Resolved values live only in the returned ``SecretSource`` objects: they are never logged and
never put into an exception or an error text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hookgate.config.settings import SecretSource, Settings
from hookgate.config.validate import SURROGATE

_EXEC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$")
_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class SecretRef:
    source: str
    provider: str
    id: str

    @property
    def label(self) -> str:
        return f"{self.source}:{self.provider}:{self.id}"


# A provider's answer per id: the value, or the error text.
Outcome = tuple[str | None, str | None]


def parse_ref(raw: Mapping[str, Any], secrets_cfg: Mapping[str, Any]) -> SecretRef:
    """A validated SecretRef object with its provider defaulted from ``secrets.defaults.<source>``."""
    source = str(raw["source"])
    provider = raw.get("provider")
    if not isinstance(provider, str) or not provider.strip():
        provider = str(secrets_cfg.get("defaults", {}).get(source, "default"))
    return SecretRef(source=source, provider=provider.strip(), id=str(raw["id"]))


def _clean(value: str | None, empty_error: str, unpaired_error: str) -> Outcome:
    """The trimmed value, or the error: empty, or holding an unpaired surrogate (a JSON ``"\ud800"`` of
    an exec answer, an environment byte that is no UTF-8): no UTF-8 encoder takes it, and a token
    is compared as UTF-8 bytes."""
    if value is None or not value.strip():
        return None, empty_error
    if SURROGATE.search(value):
        return None, unpaired_error
    return value.strip(), None


# --- env -------------------------------------------------------------------------------------------


def _resolve_env(
    name: str, cfg: Mapping[str, Any], ids: list[str], environ: Mapping[str, str]
) -> dict[str, Outcome]:
    allowlist = cfg.get("allowlist")
    out: dict[str, Outcome] = {}
    for ref_id in ids:
        if allowlist is not None and ref_id not in allowlist:
            out[ref_id] = (
                None,
                f'Environment variable "{ref_id}" is not allowlisted in secrets.providers.{name}.allowlist.',
            )
            continue
        out[ref_id] = _clean(environ.get(ref_id), f'Environment variable "{ref_id}" is missing or empty.',
                             f'Environment variable "{ref_id}" is not valid UTF-8.')
    return out


# --- file ------------------------------------------------------------------------------------------


def _json_pointer(doc: Any, pointer: str) -> tuple[bool, Any]:
    if pointer == "":
        return True, doc
    if not pointer.startswith("/"):
        return False, None
    node = doc
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isascii() and token.isdigit() and len(token) < 20 and int(token) < len(node):
            node = node[int(token)]
        else:
            return False, None
    return True, node


def _read_secret_file(cfg: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(text, reason): the file's text, or the failure reason of the ``File provider`` error."""
    path = os.path.expanduser(str(cfg["path"]))
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path, which no file has
        return None, "not found"
    if not os.path.isfile(path):
        return None, "not found"
    if not cfg.get("allowInsecurePath", False) and (st.st_uid != os.getuid() or st.st_mode & 0o066):
        return None, "insecure permissions"
    max_bytes = int(cfg.get("maxBytes", 1_048_576))
    if st.st_size > max_bytes:
        return None, "too large"
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        return None, "not found"
    if len(data) > max_bytes:
        return None, "too large"
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "invalid UTF-8"


def _resolve_file(name: str, cfg: Mapping[str, Any], ids: list[str]) -> dict[str, Outcome]:
    shown = os.path.expanduser(str(cfg["path"]))

    def fail(reason: str) -> Outcome:
        return None, f'File provider "{name}" cannot use {shown}: {reason}.'

    text, reason = _read_secret_file(cfg)
    if text is None:
        return {ref_id: fail(reason or "not found") for ref_id in ids}
    out: dict[str, Outcome] = {}
    if cfg.get("mode", "json") == "singleValue":
        value = re.sub(r"\r?\n\Z", "", text, count=1)
        for ref_id in ids:
            if ref_id != "value":
                out[ref_id] = fail('singleValue mode requires id "value"')
            else:
                out[ref_id] = (value.strip(), None) if value.strip() else fail("value is empty")
        return out
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
        return {ref_id: fail("invalid JSON") for ref_id in ids}
    for ref_id in ids:
        found, node = _json_pointer(doc, ref_id) if isinstance(doc, dict) else (False, None)
        if not found:
            out[ref_id] = fail("pointer not found")
        elif not isinstance(node, str):
            out[ref_id] = fail("value is not a string")
        elif not node.strip():
            out[ref_id] = fail("value is empty")
        elif SURROGATE.search(node):
            out[ref_id] = fail("value holds an unpaired surrogate")
        else:
            out[ref_id] = (node.strip(), None)
    return out


# --- exec ------------------------------------------------------------------------------------------


class _ExecFailure(Exception):
    pass


def _valid_exec_id(ref_id: str) -> bool:
    return bool(_EXEC_ID.match(ref_id)) and not any(seg in (".", "..") for seg in ref_id.split("/"))


def _command_problem(cfg: Mapping[str, Any], command: str) -> str | None:
    if not os.path.isabs(command):
        return "not absolute"
    try:
        lst = os.lstat(command)
    except (OSError, ValueError):  # ValueError: a NUL in the path, which no file has
        return "not found"
    if os.path.islink(command) and not cfg.get("allowSymlinkCommand", False):
        return "symlink"
    try:
        st = os.stat(command) if os.path.islink(command) else lst
    except OSError:  # an allowed symlink to nothing (it raised out of config check and serve)
        return "not found"
    trusted = [os.path.realpath(os.path.expanduser(d)) for d in cfg.get("trustedDirs", [])]
    if trusted:
        # The file that runs must lie inside: the command's real path, every symlink on it followed
        # (a symlinked directory on the way, or an allowed symlinked command, pointing out of the
        # trusted directories ran a file outside them), against the trusted directories' own.
        real = os.path.realpath(command)
        if not any(os.path.commonpath([d, real]) == d for d in trusted):
            return "outside trustedDirs"
    if not cfg.get("allowInsecurePath", False) and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        return "insecure permissions"
    return None


_REAP_WAIT_S = 1.0

# The process groups of the exec providers running now: a server that stops while a reload waits on
# one kills them (the reload is abandoned; the provider would run on, orphaned, up to its timeout).
_RUNNING_PROVIDERS: set[int] = set()


def kill_running_providers() -> None:
    for pgid in list(_RUNNING_PROVIDERS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _in_daemon_threads(jobs: Mapping[Any, Any], workers: int) -> dict[Any, Any]:
    """``{key: job()}``, at most ``workers`` at a time, each on a daemon thread: a reload abandoned at
    a stop does not keep the process alive until its providers answer (a ``ThreadPoolExecutor``'s
    threads are joined at exit: 14.5 s after ``shutdown.completed`` for a 15 s provider)."""
    slots = threading.Semaphore(max(1, workers))
    outcomes: dict[Any, tuple[bool, Any]] = {}

    def run(key: Any, job: Any) -> None:
        with slots:
            try:
                outcomes[key] = (True, job())
            except BaseException as exc:  # noqa: BLE001 - raised again below, in the caller's thread
                outcomes[key] = (False, exc)

    threads = [threading.Thread(target=run, args=item, name="hookgate-secrets", daemon=True) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = {}
    for key in jobs:
        ok, value = outcomes[key]
        if not ok:
            raise value
        results[key] = value
    return results


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the provider's process group: the provider and whatever it started (a wrapper's
    ``vault`` or ``op`` call), which a kill of the provider alone left running with no time limit."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group has exited; or a member this user may
        pass  # not signal (a setuid program): see _run_exec


def _run_exec(
    name: str, cfg: Mapping[str, Any], command: str, request: bytes, environ: Mapping[str, str]
) -> bytes:
    """Run the provider once; return stdout or raise ``_ExecFailure`` with the spec's text."""
    timeout_ms = int(cfg.get("timeoutMs", 5000))
    idle_ms = int(cfg.get("noOutputTimeoutMs") or timeout_ms)
    max_output = int(cfg.get("maxOutputBytes", 1_048_576))
    env = {k: environ[k] for k in cfg.get("passEnv", []) if k in environ}
    env.update(cfg.get("env", {}))
    proc = subprocess.Popen(
        [command, *cfg.get("args", [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=os.path.dirname(command),
        env=env,
        close_fds=True,
        start_new_session=True,  # its own process group: a timeout or the cap kills what it started too
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    _RUNNING_PROVIDERS.add(proc.pid)
    start = last_output = time.monotonic()
    stdout = bytearray()
    total = 0
    pending = memoryview(request)
    sel = selectors.DefaultSelector()
    try:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now - start >= timeout_ms / 1000:
                raise _ExecFailure(f'Exec provider "{name}" timed out after {timeout_ms}ms.')
            if now - last_output >= idle_ms / 1000:
                raise _ExecFailure(f'Exec provider "{name}" produced no output for {idle_ms}ms.')
            wait = min(start + timeout_ms / 1000, last_output + idle_ms / 1000) - now
            if not sel.get_map():
                try:
                    proc.wait(timeout=max(wait, 0.001))
                    break
                except subprocess.TimeoutExpired:
                    continue
            for key, _ in sel.select(timeout=max(wait, 0.001)):
                if key.fileobj is proc.stdin:
                    try:
                        written = os.write(proc.stdin.fileno(), pending[:_CHUNK])
                    except BrokenPipeError:
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                last_output = time.monotonic()
                total += len(chunk)
                if total > max_output:
                    raise _ExecFailure(f'Exec provider "{name}" output exceeded {max_output} bytes.')
                if key.fileobj is proc.stdout:
                    stdout += chunk
    except BaseException:
        # (the provider may have exited and a child of it still hold its output: the group, not the pid)
        _kill_group(proc)
        raise
    finally:
        _RUNNING_PROVIDERS.discard(proc.pid)
        sel.close()
        if proc.poll() is None:  # only a failure leaves the loop with the provider running
            try:
                proc.wait(timeout=_REAP_WAIT_S)
            except subprocess.TimeoutExpired:
                # a provider this user may not signal (a setuid `sudo`): left to run, its pipes closed
                # below, and reaped whenever it ends, rather than the resolution waiting with no limit
                threading.Thread(target=proc.wait, name="hookgate-exec-reaper", daemon=True).start()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if not stream.closed:
                stream.close()
    if proc.returncode != 0:
        raise _ExecFailure(f'Exec provider "{name}" exited with code {proc.returncode}.')
    return bytes(stdout)


def _parse_exec_output(name: str, cfg: Mapping[str, Any], raw: bytes, ids: list[str]) -> dict[str, Outcome]:
    invalid = f'Exec provider "{name}" returned invalid JSON.'
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise _ExecFailure(invalid)
    single = not cfg.get("jsonOnly", True) and len(ids) == 1
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
        if single:
            return {ids[0]: _clean(text, *_exec_value_errors(name, ids[0]))}
        raise _ExecFailure(invalid) from None
    if single and isinstance(doc, str):
        return {ids[0]: _clean(doc, *_exec_value_errors(name, ids[0]))}
    if (
        not isinstance(doc, dict)
        or doc.get("protocolVersion") != 1
        or not isinstance(doc.get("values", {}), dict)
    ):
        raise _ExecFailure(invalid)
    values: dict[str, Any] = doc.get("values", {})
    errors = doc.get("errors") or {}
    if not isinstance(errors, dict):
        raise _ExecFailure(invalid)
    out: dict[str, Outcome] = {}
    for ref_id in ids:
        failed = f'Exec provider "{name}" failed for id "{ref_id}"'
        if ref_id in errors:
            entry = errors[ref_id]
            message = entry.get("message") if isinstance(entry, dict) else entry
            out[ref_id] = (None, f"{failed} ({message}).")
        elif ref_id not in values:
            out[ref_id] = (None, f'Exec provider "{name}" response missing id "{ref_id}".')
        elif not isinstance(values[ref_id], str):
            out[ref_id] = (None, f"{failed} (value is not a string).")
        else:
            out[ref_id] = _clean(values[ref_id], *_exec_value_errors(name, ref_id))
    return out


def _exec_value_errors(name: str, ref_id: str) -> tuple[str, str]:
    failed = f'Exec provider "{name}" failed for id "{ref_id}"'
    return f"{failed} (value is empty).", f"{failed} (value holds an unpaired surrogate)."


def _resolve_exec(
    name: str, cfg: Mapping[str, Any], ids: list[str], environ: Mapping[str, str], caps: Mapping[str, Any]
) -> dict[str, Outcome]:
    command = os.path.expanduser(str(cfg["command"]))
    problem = _command_problem(cfg, command)
    if problem is not None:
        return {i: (None, f'Exec provider "{name}" cannot run {command}: {problem}.') for i in ids}
    out: dict[str, Outcome] = {}
    valid: list[str] = []
    for ref_id in ids:
        if _valid_exec_id(ref_id):
            valid.append(ref_id)
        else:
            out[ref_id] = (None, f'Exec provider "{name}" cannot run {command}: invalid id "{ref_id}".')
    if not valid:
        return out
    max_refs = int(caps.get("maxRefsPerProvider", 512))
    if len(valid) > max_refs:
        error = f'Exec provider "{name}" cannot run {command}: too many refs ({len(valid)} > {max_refs}).'
        return {**out, **{i: (None, error) for i in valid}}
    request = json.dumps({"protocolVersion": 1, "provider": name, "ids": valid}, ensure_ascii=False).encode()
    max_batch = int(caps.get("maxBatchBytes", 262_144))
    if len(request) > max_batch:
        error = f'Exec provider "{name}" cannot run {command}: request exceeds {max_batch} bytes.'
        return {**out, **{i: (None, error) for i in valid}}
    try:
        raw = _run_exec(name, cfg, command, request, environ)
        out.update(_parse_exec_output(name, cfg, raw, valid))
    except _ExecFailure as exc:
        out.update({i: (None, str(exc)) for i in valid})
    except OSError:
        out.update(
            {i: (None, f'Exec provider "{name}" cannot run {command}: not executable.') for i in valid}
        )
    except ValueError:  # what exec refuses before running: a NUL in an argument, an invalid env name
        out.update(
            {i: (None, f'Exec provider "{name}" cannot run {command}: invalid args or env.') for i in valid}
        )
    return out


# --- one pass --------------------------------------------------------------------------------------


def _provider_batch(
    source: str,
    name: str,
    ids: list[str],
    secrets_cfg: Mapping[str, Any],
    environ: Mapping[str, str],
) -> dict[str, Outcome]:
    providers: Mapping[str, Any] = secrets_cfg.get("providers", {})
    cfg = providers.get(name)
    if cfg is None:
        if source == "env" and name == secrets_cfg.get("defaults", {}).get("env", "default"):
            return _resolve_env(name, {}, ids, environ)
        return {
            i: (None, f'Secret provider "{name}" is not configured (ref: {source}:{name}:{i}).') for i in ids
        }
    if cfg.get("source") != source:
        return {
            i: (None, f'Secret provider "{name}" has source "{cfg.get("source")}", not "{source}".')
            for i in ids
        }
    if source == "env":
        return _resolve_env(name, cfg, ids, environ)
    if source == "file":
        return _resolve_file(name, cfg, ids)
    return _resolve_exec(name, cfg, ids, environ, secrets_cfg.get("resolution", {}))


def resolve_secret_inputs(
    inputs: Sequence[tuple[str, Any]],
    secrets_cfg: Mapping[str, Any],
    environ: Mapping[str, str],
) -> dict[str, SecretSource]:
    """Resolve every secret input (key path, raw string or SecretRef dict) in one pass.

    Returns key path → ``SecretSource``; an unresolved input has ``value=None`` and the error text.
    """
    refs: dict[str, SecretRef] = {}
    result: dict[str, SecretSource] = {}
    for key_path, raw in inputs:
        if isinstance(raw, str):
            value, error = _clean(raw, "secret value is empty", "secret value holds an unpaired surrogate")
            result[key_path] = SecretSource(key_path, "string", value, error)
        else:
            refs[key_path] = parse_ref(raw, secrets_cfg)
    batches: dict[tuple[str, str], list[str]] = {}
    for ref in refs.values():
        ids = batches.setdefault((ref.source, ref.provider), [])
        if ref.id not in ids:
            ids.append(ref.id)
    workers = int(secrets_cfg.get("resolution", {}).get("maxProviderConcurrency", 4))
    outcomes: dict[tuple[str, str], dict[str, Outcome]] = {}
    if batches:
        outcomes = _in_daemon_threads(
            {key: functools.partial(_provider_batch, key[0], key[1], ids, secrets_cfg, environ)
             for key, ids in batches.items()}, workers)
    for key_path, ref in refs.items():
        value, error = outcomes[(ref.source, ref.provider)][ref.id]
        result[key_path] = SecretSource(key_path, ref.label, value, error)
    return {key_path: result[key_path] for key_path, _ in inputs}


def unresolved_secret_warnings(settings: Settings) -> list[str]:
    """``config check``'s warnings about the secret inputs a valid config may leave unresolved, and
    what that does (webhooks.md §1.3): an enabled channel's deliveries dead-letter, an agent runtime's
    runs end ``skipped``. (A route's unresolved secret skips the route, which the route's own warning
    says; the others are errors.)"""
    enabled = {c.id for c in settings.channels if c.enabled}
    lines = []
    for item in settings.secret_inputs:
        if item.value is not None:
            continue
        section, _, rest = item.key_path.partition(".")
        channel = rest.split(".", 1)[0]
        if section == "channels" and channel in enabled:
            effect = f"every delivery to channel {channel} dead-letters (webhooks.md §1.3)"
        elif section == "agents":
            effect = "every run of an agent with this runtime ends skipped (model.md §5.4)"
        else:
            continue
        lines.append(f"{item.key_path}: secret unresolved ({item.error or 'no value'}): {effect}")
    return lines
