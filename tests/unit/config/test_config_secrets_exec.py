"""Exec provider tests with real subprocesses (protocol v1, webhooks.md §1.3)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hookgate.config.secrets import resolve_secret_inputs

if TYPE_CHECKING:
    from conftest import Kit

ECHO = """
import json, os, sys
req = json.loads(sys.stdin.read())
with open("calls.log", "a") as fh:
    fh.write(json.dumps(req) + "\\n")
values, errors = {}, {}
for i in req["ids"]:
    if i == "env":
        values[i] = json.dumps(sorted(k for k in os.environ if k != "LC_CTYPE"))
    elif i == "cwd":
        values[i] = os.getcwd()
    elif i == "bad":
        errors[i] = {"message": "denied"}
    elif i == "gone":
        pass
    elif i == "num":
        values[i] = 5
    else:
        values[i] = " " + i + "-value "
print(json.dumps({"protocolVersion": 1, "values": values, "errors": errors}))
"""


def exec_cfg(command: Path | str, **kw: Any) -> dict[str, Any]:
    provider = {
        "source": "exec",
        "command": str(command),
        "args": [],
        "passEnv": [],
        "env": {},
        "timeoutMs": 5000,
        "maxOutputBytes": 1_048_576,
        "jsonOnly": True,
        "allowSymlinkCommand": False,
        "trustedDirs": [],
        "allowInsecurePath": False,
        **kw,
    }
    return {
        "providers": {"ex": provider},
        "defaults": {"env": "default", "file": "default", "exec": "default"},
        "resolution": {"maxProviderConcurrency": 4, "maxRefsPerProvider": 512, "maxBatchBytes": 262_144},
    }


def ref(ref_id: str) -> dict[str, str]:
    return {"source": "exec", "provider": "ex", "id": ref_id}


def resolve(
    ids: list[str], secrets: dict[str, Any], env: dict[str, str] | None = None
) -> dict[str, tuple[str | None, str | None]]:
    out = resolve_secret_inputs([(f"k{n}", ref(i)) for n, i in enumerate(ids)], secrets, env or {})
    return {ids[int(k[1:])]: (v.value, v.error) for k, v in out.items()}


def test_batch_in_one_call_with_values_errors_and_missing(kit: Kit, tmp_path: Path) -> None:
    cmd = kit.script("provider.py", ECHO)
    out = resolve(["a", "b/c", "a", "bad", "gone", "num"], exec_cfg(cmd))
    assert out["a"] == ("a-value", None)
    assert out["b/c"] == ("b/c-value", None)
    assert out["bad"] == (None, 'Exec provider "ex" failed for id "bad" (denied).')
    assert out["gone"] == (None, 'Exec provider "ex" response missing id "gone".')
    assert out["num"][0] is None
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 1
    assert json.loads(calls[0]) == {
        "protocolVersion": 1,
        "provider": "ex",
        "ids": ["a", "b/c", "bad", "gone", "num"],
    }


def test_environment_and_cwd(kit: Kit, tmp_path: Path) -> None:
    cmd = kit.script("provider.py", ECHO)
    secrets = exec_cfg(cmd, passEnv=["PASSME", "ABSENT"], env={"LIT": "1"})
    out = resolve(["env", "cwd"], secrets, {"PASSME": "x", "OTHER": "y"})
    assert json.loads(out["env"][0] or "") == ["LIT", "PASSME"]
    assert out["cwd"] == (str(tmp_path), None)


def test_command_checks(kit: Kit, tmp_path: Path) -> None:
    cmd = kit.script("provider.py", ECHO)
    link = tmp_path / "link.py"
    os.symlink(cmd, link)
    fail = 'Exec provider "ex" cannot run {}: {}.'
    assert resolve(["a"], exec_cfg("relative/provider.py"))["a"] == (
        None,
        fail.format("relative/provider.py", "not absolute"),
    )
    assert resolve(["a"], exec_cfg(link))["a"] == (None, fail.format(link, "symlink"))
    assert resolve(["a"], exec_cfg(link, allowSymlinkCommand=True))["a"] == ("a-value", None)
    dangling = tmp_path / "dangling.py"
    os.symlink(tmp_path / "gone.py", dangling)  # allowed, but to nothing: it raised FileNotFoundError
    assert resolve(["a"], exec_cfg(dangling, allowSymlinkCommand=True))["a"] == (None, fail.format(dangling, "not found"))
    elsewhere = tmp_path / "trusted"
    elsewhere.mkdir()
    assert resolve(["a"], exec_cfg(cmd, trustedDirs=[str(elsewhere)]))["a"] == (
        None,
        fail.format(cmd, "outside trustedDirs"),
    )
    assert resolve(["a"], exec_cfg(cmd, trustedDirs=[str(tmp_path)]))["a"] == ("a-value", None)
    os.chmod(cmd, 0o720)
    assert resolve(["a"], exec_cfg(cmd))["a"] == (None, fail.format(cmd, "insecure permissions"))
    assert resolve(["a"], exec_cfg(cmd, allowInsecurePath=True))["a"] == ("a-value", None)


def test_a_command_owned_by_another_user_is_refused(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    # webhooks.md §1.3: owned by the current user unless allowInsecurePath (a root-owned system binary
    # run by a non-root hookgate, say); the check was tested nowhere
    cmd = kit.script("provider.py", ECHO)
    owner = os.stat(cmd).st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    fail = 'Exec provider "ex" cannot run {}: {}.'
    assert resolve(["a"], exec_cfg(cmd))["a"] == (None, fail.format(cmd, "insecure permissions"))
    assert resolve(["a"], exec_cfg(cmd, allowInsecurePath=True))["a"] == ("a-value", None)
    monkeypatch.setattr(os, "getuid", lambda: owner)
    assert resolve(["a"], exec_cfg(cmd))["a"] == ("a-value", None)


def test_trusted_dirs_hold_the_file_that_runs_whatever_symlinks_lead_to_it(kit: Kit, tmp_path: Path) -> None:
    # the check took the command's path as written or its real path: a symlinked directory on the
    # way, or an allowed symlinked command, inside the trusted directory ran a file outside it
    trusted, other = tmp_path / "trusted", tmp_path / "other"
    trusted.mkdir()
    other.mkdir()
    outside = kit.script("other/provider.py", ECHO)
    inside = kit.script("trusted/provider.py", ECHO)
    os.symlink("../other", trusted / "dir")
    os.symlink("../other/provider.py", trusted / "out.py")
    os.symlink(str(inside), other / "in.py")
    os.symlink(str(trusted), tmp_path / "trusted-link")
    fail = 'Exec provider "ex" cannot run {}: {}.'
    only = [str(trusted)]
    via_dir = trusted / "dir" / "provider.py"
    assert resolve(["a"], exec_cfg(via_dir, trustedDirs=only))["a"] == (None, fail.format(via_dir, "outside trustedDirs"))
    via_link = trusted / "out.py"
    assert resolve(["a"], exec_cfg(via_link, trustedDirs=only, allowSymlinkCommand=True))["a"] == (
        None, fail.format(via_link, "outside trustedDirs"))
    assert resolve(["a"], exec_cfg(outside, trustedDirs=only))["a"] == (None, fail.format(outside, "outside trustedDirs"))
    # what runs is inside: a link to it from elsewhere (allowed), a trusted directory named through a symlink
    assert resolve(["a"], exec_cfg(other / "in.py", trustedDirs=only, allowSymlinkCommand=True))["a"] == ("a-value", None)
    assert resolve(["a"], exec_cfg(inside, trustedDirs=[str(tmp_path / "trusted-link")]))["a"] == ("a-value", None)
    assert resolve(["a"], exec_cfg(tmp_path / "trusted-link" / "provider.py", trustedDirs=only))["a"] == ("a-value", None)


def test_what_exec_refuses_is_a_resolution_error_not_a_crash(kit: Kit, tmp_path: Path) -> None:
    # a NUL in the command, an argument or an environment name the OS refuses: os.lstat and Popen
    # raise ValueError, which escaped `config check` as a traceback
    cmd = kit.script("provider.py", ECHO)
    fail = 'Exec provider "ex" cannot run {}: {}.'
    assert resolve(["a"], exec_cfg(f"{cmd}\x00x"))["a"] == (None, fail.format(f"{cmd}\x00x", "not found"))
    assert resolve(["a"], exec_cfg(cmd, args=["a\x00"]))["a"] == (None, fail.format(cmd, "invalid args or env"))
    assert resolve(["a"], exec_cfg(cmd, env={"A=B": "x"}))["a"] == (None, fail.format(cmd, "invalid args or env"))


def test_invalid_ids(kit: Kit) -> None:
    cmd = kit.script("provider.py", ECHO)
    out = resolve(["ok", "../x", "a/./b", ".hidden", "a b"], exec_cfg(cmd))
    assert out["ok"] == ("ok-value", None)
    for bad in ("../x", "a/./b", ".hidden", "a b"):
        assert out[bad] == (None, f'Exec provider "ex" cannot run {cmd}: invalid id "{bad}".')


def test_exit_code_and_invalid_json(kit: Kit) -> None:
    code = kit.script("code.py", "import sys\nsys.stdin.read()\nprint('{}')\nsys.exit(3)\n")
    assert resolve(["a"], exec_cfg(code))["a"] == (None, 'Exec provider "ex" exited with code 3.')
    junk = kit.script("junk.py", "import sys\nsys.stdin.read()\nprint('not json')\n")
    assert resolve(["a"], exec_cfg(junk))["a"] == (None, 'Exec provider "ex" returned invalid JSON.')
    empty = kit.script("empty.py", "import sys\nsys.stdin.read()\n")
    assert resolve(["a"], exec_cfg(empty))["a"] == (None, 'Exec provider "ex" returned invalid JSON.')
    wrong = kit.script(
        "wrong.py", 'import sys\nsys.stdin.read()\nprint(\'{"protocolVersion": 2, "values": {}}\')\n'
    )
    assert resolve(["a"], exec_cfg(wrong))["a"] == (None, 'Exec provider "ex" returned invalid JSON.')


def test_json_only_false_single_id(kit: Kit) -> None:
    plain = kit.script("plain.py", "import sys\nsys.stdin.read()\nprint('  raw-secret  ')\n")
    assert resolve(["a"], exec_cfg(plain, jsonOnly=False))["a"] == ("raw-secret", None)
    assert resolve(["a"], exec_cfg(plain))["a"] == (None, 'Exec provider "ex" returned invalid JSON.')
    assert resolve(["a", "b"], exec_cfg(plain, jsonOnly=False))["a"] == (
        None,
        'Exec provider "ex" returned invalid JSON.',
    )
    quoted = kit.script("quoted.py", "import sys\nsys.stdin.read()\nprint('\"js\"')\n")
    assert resolve(["a"], exec_cfg(quoted, jsonOnly=False))["a"] == ("js", None)


def test_timeout_kills(kit: Kit) -> None:
    chatty = kit.script(
        "chatty.py",
        "import sys, time\nwhile True:\n    sys.stderr.write('.')\n    sys.stderr.flush()\n    time.sleep(0.05)\n",
    )
    start = time.monotonic()
    assert resolve(["a"], exec_cfg(chatty, timeoutMs=400))["a"] == (
        None,
        'Exec provider "ex" timed out after 400ms.',
    )
    assert time.monotonic() - start < 3


def test_timeout_kills_what_the_provider_started(kit: Kit, tmp_path: Path) -> None:
    # a wrapper whose CLI hangs: only the wrapper was killed, and the CLI ran on with no time limit
    pids = tmp_path / "pids"
    wrapper = kit.script(
        "wrapper.py",
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], stdout=subprocess.DEVNULL)\n"
        f"open({str(pids)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n",
    )
    # 3 s: time for the wrapper to start its child on a busy machine before the timeout kills them
    assert resolve(["a"], exec_cfg(wrapper, timeoutMs=3000))["a"] == (None, 'Exec provider "ex" timed out after 3000ms.')
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"  # a zombie is dead, awaiting its reaper
    except FileNotFoundError:
        return False


def test_no_output_timeout(kit: Kit) -> None:
    silent = kit.script("silent.py", "import time\ntime.sleep(30)\n")
    start = time.monotonic()
    assert resolve(["a"], exec_cfg(silent, noOutputTimeoutMs=300))["a"] == (
        None,
        'Exec provider "ex" produced no output for 300ms.',
    )
    assert time.monotonic() - start < 3


def test_no_output_timer_restarts_on_each_chunk(kit: Kit) -> None:
    body = (
        "import json, sys, time\n"
        "ids = json.loads(sys.stdin.read())['ids']\n"
        "for _ in range(6):\n"
        "    sys.stderr.write('.'); sys.stderr.flush(); time.sleep(0.15)\n"
        "print(json.dumps({'protocolVersion': 1, 'values': {i: 'v' for i in ids}}))\n"
    )
    slow = kit.script("slow.py", body)
    assert resolve(["a"], exec_cfg(slow, noOutputTimeoutMs=400, timeoutMs=5000))["a"] == ("v", None)


def test_output_cap(kit: Kit) -> None:
    loud = kit.script(
        "loud.py", "import sys, time\nsys.stdout.write('x' * 5000)\nsys.stdout.flush()\ntime.sleep(10)\n"
    )
    start = time.monotonic()
    assert resolve(["a"], exec_cfg(loud, maxOutputBytes=1000))["a"] == (
        None,
        'Exec provider "ex" output exceeded 1000 bytes.',
    )
    assert time.monotonic() - start < 3
    noisy_err = kit.script("err.py", "import sys\nsys.stderr.write('e' * 3000)\nprint('{}')\n")
    assert resolve(["a"], exec_cfg(noisy_err, maxOutputBytes=2000))["a"] == (
        None,
        'Exec provider "ex" output exceeded 2000 bytes.',
    )


def test_global_caps(kit: Kit) -> None:
    cmd = kit.script("provider.py", ECHO)
    secrets = exec_cfg(cmd)
    secrets["resolution"]["maxRefsPerProvider"] = 2
    out = resolve(["a", "b", "c"], secrets)
    assert all(v[0] is None and "too many refs" in (v[1] or "") for v in out.values())
    secrets = exec_cfg(cmd)
    secrets["resolution"]["maxBatchBytes"] = 20
    assert "request exceeds 20 bytes" in (resolve(["abcdefghij"], secrets)["abcdefghij"][1] or "")


def test_exec_through_config_for_route(kit: Kit) -> None:
    cmd = kit.script("provider.py", ECHO)
    s = kit.load(
        {
            "secrets": {"providers": {"vault": {"source": "exec", "command": str(cmd)}}},
            "plugins": {
                "entries": {
                    "webhooks": {
                        "config": {
                            "routes": {
                                "r": {
                                    "sessionKey": "s",
                                    "secret": {"source": "exec", "provider": "vault", "id": "route/r"},
                                },
                                "q": {
                                    "sessionKey": "s",
                                    "path": "/q",
                                    "secret": {"source": "exec", "provider": "vault", "id": "bad"},
                                },
                            }
                        }
                    }
                }
            },
        }
    )
    r, q = s.webhooks.routes
    assert r.auth.secrets == ("route/r-value",)
    assert q.skipped_reason == 'Exec provider "vault" failed for id "bad" (denied).'
    assert [x.source for x in s.secret_inputs] == ["exec:vault:route/r", "exec:vault:bad"]


def test_a_value_holding_an_unpaired_surrogate_is_unresolved(kit: Kit) -> None:
    """A JSON ``"\\ud800"`` decodes to a lone surrogate, which no UTF-8 encoder takes (a token is
    compared as UTF-8 bytes): the exec protocol's own error form, a pair is its character."""
    cmd = kit.script("provider.py", 'print(\'{"protocolVersion": 1, "values": {"lone": "a\\\\ud800", '
                                    '"pair": "x\\\\ud83d\\\\ude80y"}}\')\n')
    out = resolve(["lone", "pair"], exec_cfg(cmd))
    assert out["pair"] == ("x\U0001f680y", None)
    assert out["lone"] == (None, 'Exec provider "ex" failed for id "lone" (value holds an unpaired surrogate).')


def test_a_provider_that_cannot_be_signalled_does_not_hold_the_resolution(
    kit: Kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A setuid provider (`sudo`) cannot be killed by this user: the kill was refused and the cleanup
    # waited for the provider to end by itself, so `timeoutMs` bounded nothing. (The refusal is made
    # here by os.killpg answering EPERM, as the kernel does for such a process group.)
    pidfile = tmp_path / "pid"
    stuck = kit.script("stuck.py", f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")

    def refused(pgid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "killpg", refused)
    start = time.monotonic()
    try:
        assert resolve(["a"], exec_cfg(stuck, timeoutMs=500))["a"] == (None, 'Exec provider "ex" timed out after 500ms.')
        assert time.monotonic() - start < 5
    finally:
        monkeypatch.undo()
        deadline = time.monotonic() + 20  # the provider runs on (it could not be killed): let it write
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
