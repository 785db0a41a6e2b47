from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hookgate.config.secrets import resolve_secret_inputs

if TYPE_CHECKING:
    from conftest import Kit

DEFAULTS = {"defaults": {"env": "default", "file": "default", "exec": "default"}, "resolution": {}}


def cfg(**providers: Any) -> dict[str, Any]:
    return {**DEFAULTS, "providers": providers}


def resolve(
    ref: dict[str, Any], secrets: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[str | None, str | None]:
    out = resolve_secret_inputs([("k", ref)], secrets, env or {})["k"]
    return out.value, out.error


# --- strings and env -------------------------------------------------------------------------------


def test_string_inputs() -> None:
    out = resolve_secret_inputs([("a", " v "), ("b", "  ")], cfg(), {})
    assert (out["a"].value, out["a"].source, out["a"].error) == ("v", "string", None)
    assert out["b"].value is None and out["b"].error


def test_env_implicit_default_provider() -> None:
    assert resolve({"source": "env", "id": "X"}, cfg(), {"X": " v "}) == ("v", None)
    assert resolve({"source": "env", "id": "X"}, cfg(), {}) == (
        None,
        'Environment variable "X" is missing or empty.',
    )
    assert resolve({"source": "env", "id": "X"}, cfg(), {"X": ""}) == (
        None,
        'Environment variable "X" is missing or empty.',
    )


def test_env_source_label() -> None:
    out = resolve_secret_inputs([("k", {"source": "env", "id": "X"})], cfg(), {"X": "v"})["k"]
    assert out.source == "env:default:X" and out.key_path == "k"


def test_env_allowlist() -> None:
    secrets = cfg(vault={"source": "env", "allowlist": ["OK"]})
    assert resolve({"source": "env", "provider": "vault", "id": "OK"}, secrets, {"OK": "1"}) == ("1", None)
    assert resolve({"source": "env", "provider": "vault", "id": "NO"}, secrets, {"NO": "1"}) == (
        None,
        'Environment variable "NO" is not allowlisted in secrets.providers.vault.allowlist.',
    )


def test_provider_not_configured_and_wrong_source() -> None:
    assert resolve({"source": "env", "provider": "other", "id": "X"}, cfg(), {"X": "1"}) == (
        None,
        'Secret provider "other" is not configured (ref: env:other:X).',
    )
    assert resolve({"source": "file", "id": "/x"}, cfg()) == (
        None,
        'Secret provider "default" is not configured (ref: file:default:/x).',
    )
    secrets = cfg(default={"source": "env"})
    assert resolve({"source": "file", "id": "/x"}, secrets) == (
        None,
        'Secret provider "default" has source "env", not "file".',
    )


def test_defaults_choose_provider() -> None:
    secrets = {
        **cfg(mine={"source": "env", "allowlist": []}),
        "defaults": {"env": "mine", "file": "default", "exec": "default"},
    }
    assert resolve({"source": "env", "id": "X"}, secrets, {"X": "1"}) == (
        None,
        'Environment variable "X" is not allowlisted in secrets.providers.mine.allowlist.',
    )


# --- file ------------------------------------------------------------------------------------------


def file_cfg(path: Path, **kw: Any) -> dict[str, Any]:
    return cfg(default={"source": "file", "path": str(path), "mode": "json", "maxBytes": 1_048_576, **kw})


def test_file_json_pointer(kit: Kit) -> None:
    doc = {"a": {"b": " v "}, "x/y": {"t~": "esc"}, "n": 1, "e": " ", "l": ["z"]}
    path = kit.secret_file("s.json", "\ufeff" + json.dumps(doc))
    secrets = file_cfg(path)
    fail = f'File provider "default" cannot use {path}: '
    assert resolve({"source": "file", "id": "/a/b"}, secrets) == ("v", None)
    assert resolve({"source": "file", "id": "/x~1y/t~0"}, secrets) == ("esc", None)
    assert resolve({"source": "file", "id": "/l/0"}, secrets) == ("z", None)
    assert resolve({"source": "file", "id": "/nope"}, secrets) == (None, fail + "pointer not found.")
    assert resolve({"source": "file", "id": "/n"}, secrets) == (None, fail + "value is not a string.")
    assert resolve({"source": "file", "id": "/e"}, secrets) == (None, fail + "value is empty.")
    # digits only in ASCII ("²".isdigit() is true, int("²") raised), and no 5 000-digit index
    assert resolve({"source": "file", "id": "/l/²"}, secrets) == (None, fail + "pointer not found.")
    assert resolve({"source": "file", "id": "/l/" + "0" * 5000}, secrets) == (None, fail + "pointer not found.")
    deep = kit.secret_file("deep.json", "[" * 100_000 + "]" * 100_000)
    assert resolve({"source": "file", "id": "/a"}, file_cfg(deep)) == (
        None, f'File provider "default" cannot use {deep}: invalid JSON.'
    )


def test_file_single_value(kit: Kit) -> None:
    path = kit.secret_file("token.txt", "tok\r\n")
    secrets = file_cfg(path, mode="singleValue")
    assert resolve({"source": "file", "id": "value"}, secrets) == ("tok", None)
    assert resolve({"source": "file", "id": "other"}, secrets) == (
        None,
        f'File provider "default" cannot use {path}: singleValue mode requires id "value".',
    )


def test_file_errors(kit: Kit, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    assert resolve({"source": "file", "id": "/a"}, file_cfg(missing)) == (
        None,
        f'File provider "default" cannot use {missing}: not found.',
    )
    nul = tmp_path / "a\x00b"  # os.stat raises ValueError: no file has such a name
    assert resolve({"source": "file", "id": "/a"}, file_cfg(nul)) == (
        None,
        f'File provider "default" cannot use {nul}: not found.',
    )
    loose = kit.secret_file("loose.json", '{"a":"v"}', mode=0o644)
    assert resolve({"source": "file", "id": "/a"}, file_cfg(loose)) == (
        None,
        f'File provider "default" cannot use {loose}: insecure permissions.',
    )
    assert resolve({"source": "file", "id": "/a"}, file_cfg(loose, allowInsecurePath=True)) == ("v", None)
    big = kit.secret_file("big.json", json.dumps({"a": "x" * 100}))
    assert resolve({"source": "file", "id": "/a"}, file_cfg(big, maxBytes=50)) == (
        None,
        f'File provider "default" cannot use {big}: too large.',
    )


def test_file_owned_by_someone_else(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    # hookgate running as another user than the file's owner (a chown needed root, and the test was
    # skipped for everyone else: a non-root run could not catch the rule's loss)
    path = kit.secret_file("other.json", '{"a":"v"}')
    owner = os.stat(path).st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    assert resolve({"source": "file", "id": "/a"}, file_cfg(path)) == (
        None,
        f'File provider "default" cannot use {path}: insecure permissions.',
    )
    assert resolve({"source": "file", "id": "/a"}, file_cfg(path, allowInsecurePath=True)) == ("v", None)
    monkeypatch.setattr(os, "getuid", lambda: owner)
    assert resolve({"source": "file", "id": "/a"}, file_cfg(path)) == ("v", None)


def test_file_through_config(kit: Kit) -> None:
    path = kit.secret_file("s.json", json.dumps({"hooks": "from-file"}))
    s = kit.load(
        {
            "secrets": {"providers": {"files": {"source": "file", "path": str(path)}}},
            "hooks": {"enabled": True, "token": {"source": "file", "provider": "files", "id": "/hooks"}},
        }
    )
    assert s.hooks.token == "from-file"
    (src,) = s.secret_inputs
    assert (src.key_path, src.source) == ("hooks.token", "file:files:/hooks")


def test_provider_schema_errors(kit: Kit) -> None:
    assert kit.errors(
        {"secrets": {"providers": {"f": {"source": "file"}, "e": {"source": "exec", "bogus": 1}, "x": {}}}}
    ) == [
        "secrets.providers.f.path: required",
        "secrets.providers.e.bogus: unknown key",
        "secrets.providers.e.command: required",
        "secrets.providers.x.source: required",
    ]


def test_a_file_secret_holding_an_unpaired_surrogate_is_unresolved(kit: Kit) -> None:
    r"""A JSON ``"\ud800"`` decodes to a lone surrogate, which no UTF-8 encoder takes (a token is compared
    as UTF-8 bytes); a pair is its character."""
    path = kit.secret_file("s.json", '{"lone": "ab\\ud800cd", "pair": "x\\ud83d\\ude80y"}')
    secrets = file_cfg(path)
    assert resolve({"source": "file", "id": "/pair"}, secrets) == ("x\U0001f680y", None)
    assert resolve({"source": "file", "id": "/lone"}, secrets) == (
        None, f'File provider "default" cannot use {path}: value holds an unpaired surrogate.')


def test_env_value_that_is_no_utf8() -> None:
    # os.environ holds a byte that is no UTF-8 as a lone surrogate (surrogateescape)
    assert resolve({"source": "env", "id": "X"}, cfg(), {"X": "a\udcffb"}) == (
        None, 'Environment variable "X" is not valid UTF-8.')
