"""hooks.md §6.1–§6.8 without a server: matching, building, transforms, merge, validation, sources."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hookgate.config.loader import load_settings
from hookgate.config.settings import MappingSettings, Settings
from hookgate.errors import ConfigError, RequestError
from hookgate.hooks.actions import AgentAction, WakeAction
from hookgate.hooks.mappings import (
    Lazy,
    RequestContext,
    base_action,
    external_source,
    finalize,
    hook_test,
    match_mapping,
    merge,
    request_headers,
    request_query,
    resolve,
)
from hookgate.hooks.templates import TemplateContext
from hookgate.hooks.transforms_loader import TransformFailed, TransformLoader
from hookgate.transforms import SKIP, TransformContext


def load(tmp: Path, **hooks: Any) -> Settings:
    cfg = {"agents": {"list": [{"id": "main", "default": True}, {"id": "hooks"}]},
           "channels": {"list": [{"id": "telegram", "kind": "console"}]} if hooks.pop("tg", False) else None,
           "hooks": {"enabled": True, "token": "hook-secret", **hooks}}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (tmp / "hookgate.json5").write_text(json.dumps(cfg))
    return load_settings(str(tmp / "hookgate.json5"), {}, cwd=str(tmp))


def transform_file(tmp: Path, name: str, code: str) -> Path:
    d = tmp / "hooks" / "transforms"
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text(code)
    return f


def rctx(payload: Any, sub: str = "x", headers: dict[str, str] | None = None) -> RequestContext:
    return RequestContext(payload, headers or {}, {}, sub, f"/hooks/{sub}", 0)


def run(settings: Settings, sub: str, payload: Any, loader: TransformLoader | None = None,
        headers: dict[str, str] | None = None) -> Any:
    m = match_mapping(settings.hooks.mappings, sub, payload)
    assert m is not None
    return asyncio.run(resolve(m, rctx(payload, sub, headers), settings, loader or TransformLoader()))


def m(**kw: Any) -> MappingSettings:
    return MappingSettings(index=0, id=kw.pop("id", "m"), match_path=kw.pop("match_path", None),
                           match_source=kw.pop("match_source", None), **kw)


# --- request context (§2 step 10) ----------------------------------------------------------------------


def test_request_headers_and_query() -> None:
    h = request_headers([(b"X-Foo", b"a"), (b"x-foo", b"b"), (b"Host", b"h")])
    assert h == {"x-foo": "a, b", "host": "h"}
    assert request_query(b"a=1&a=2&b=%C3%A9+x&c") == {"a": "2", "b": "é x", "c": ""}


# --- matching (§6.2) ---------------------------------------------------------------------------------


def test_matching_first_wins_and_source_is_exact() -> None:
    ms = [m(id="a", match_path="gh", match_source="github"), m(id="b", match_path="gh"), m(id="c")]
    assert match_mapping(ms, "gh", {"source": "github"}).id == "a"  # type: ignore[union-attr]
    assert match_mapping(ms, "/gh/", {"source": "GitHub"}).id == "b"  # type: ignore[union-attr]
    assert match_mapping(ms, "gh", {"source": " github"}).id == "b"  # type: ignore[union-attr]
    assert match_mapping(ms, "GH", [{"source": "github"}]).id == "c"  # type: ignore[union-attr]
    assert match_mapping(ms[:2], "other", {}) is None
    assert match_mapping([m(match_source="x")], "p", {"source": 1}) is None


# --- building (§6.4) and merging (§6.5) ---------------------------------------------------------------


def tctx(payload: Any) -> TemplateContext:
    return TemplateContext(payload, {}, {}, "p", 0)


def test_base_actions_and_session_key_source() -> None:
    wake = base_action(m(action="wake", text_template=" Hi {{who}} "), tctx({"who": "Ada"}))
    assert wake == {"kind": "wake", "text": " Hi Ada ", "mode": "now"}
    agent = base_action(m(message_template=" {{a}} ", name=" {{n}} ", session_key="hook:{{a}}", to="  ",
                          model="{{nothing}}", thinking="low", timeout_seconds=30), tctx({"a": "x", "n": ""}))
    assert agent["message"] == " x " and agent["name"] is None and agent["to"] is None and agent["model"] is None
    assert (agent["sessionKey"], agent["sessionKeySource"]) == ("hook:x", "mapping-templated")
    assert agent["thinking"] == "low" and agent["timeoutSeconds"] == 30 and agent["deliver"] is True
    static = base_action(m(session_key="hook:static"), tctx({}))
    assert static["sessionKeySource"] == "mapping-static"
    assert base_action(m(session_key="   "), tctx({}))["sessionKeySource"] is None


def base_agent(**kw: Any) -> dict[str, Any]:
    return {**base_action(m(message_template="base", name="N", agent_id="hooks", session_key="hook:s",
                            channel="last", to="t", model="m1", thinking="low", timeout_seconds=5,
                            allow_unsafe_external_content=False), tctx({})), **kw}


def test_merge_agent_rules() -> None:
    b = base_agent()
    out = merge(b, {"message": 5, "name": None, "to": "x", "deliver": "false", "wakeMode": "next-heartbeat",
                    "allowUnsafeExternalContent": True, "sessionKeySource": "mapping-static", "junk": 1})
    assert out["message"] == "base" and out["name"] == "N" and out["to"] == "x" and out["deliver"] is True
    assert out["wakeMode"] == "next-heartbeat" and out["allowUnsafeExternalContent"] is True
    assert out["sessionKeySource"] == "mapping-static"  # no transform key: the base source is kept
    out = merge(b, {"sessionKey": "hook:t", "sessionKeySource": "mapping-static"})
    assert (out["sessionKey"], out["sessionKeySource"]) == ("hook:t", "mapping-templated")
    a = finalize(merge(b, {"sessionKey": "  "}), ())
    assert isinstance(a, AgentAction) and a.session_key is None and a.session_key_source is None


def test_merge_kind_switches() -> None:
    w = merge(base_agent(), {"kind": "wake", "text": "Ping Ada"})
    assert w == {"kind": "wake", "text": "Ping Ada", "mode": "now"}
    assert merge(base_agent(), {"kind": "wake"})["text"] == ""
    wake_base = base_action(m(action="wake", text_template="t", wake_mode="next-heartbeat"), tctx({}))
    assert merge(wake_base, {"mode": "now"}) == {"kind": "wake", "text": "t", "mode": "next-heartbeat"}
    a = merge(wake_base, {"kind": "agent", "message": "hi"})
    assert a["message"] == "hi" and a["name"] is None and a["wakeMode"] == "now"
    assert merge(wake_base, {"kind": "agent"})["message"] == ""
    for bad in ("sms", None, 1):  # present but not "wake"/"agent" (null is not "absent")
        with pytest.raises(TransformFailed, match="invalid kind"):
            merge(wake_base, {"kind": bad})


def test_finalize_validation_and_normalisation() -> None:
    with pytest.raises(RequestError, match="^hook mapping requires text$"):
        finalize({"kind": "wake", "text": "  ", "mode": "now"}, ())
    with pytest.raises(RequestError, match="^hook mapping requires message$"):
        finalize(base_agent(message=" \n"), ())
    assert finalize({"kind": "wake", "text": " t ", "mode": "x"}, ()) == WakeAction(" t ", "now")
    with pytest.raises(RequestError, match=r"^channel must be last\|telegram$"):
        finalize(merge(base_agent(), {"channel": 5}), ("telegram",))
    a = finalize(merge(base_agent(), {"name": 3, "timeoutSeconds": "9", "channel": " Telegram ", "model": " m "}),
                 ("telegram",))
    assert isinstance(a, AgentAction)
    assert (a.name, a.timeout_seconds, a.channel, a.model, a.message) == ("Hook", None, "telegram", "m", "base")
    for model in (" ", "", 5, []):  # a model the transform gives is a §5.1 request field
        with pytest.raises(RequestError, match="^model required$"):
            finalize(merge(base_agent(), {"model": model}), ())
    # a null override keeps the base model; the mapping's own (templated) model is not checked
    assert finalize(merge(base_agent(model="b"), {"model": None}), ()).model == "b"  # type: ignore[union-attr]
    assert finalize(base_agent(model=""), ()).model is None  # type: ignore[union-attr]
    a = finalize(merge(base_agent(), {"timeoutSeconds": 9.9, "agentId": " hooks "}), ())
    assert isinstance(a, AgentAction) and a.timeout_seconds == 9 and a.agent_id == "hooks"


def test_external_source() -> None:
    assert external_source("gmail", {}, None) == "gmail"
    assert external_source("mail", {"source": " GMail "}, None) == "gmail"
    assert external_source("mail", [], "hook:gmail:1") == "gmail"
    assert external_source("mail", {}, "hook:other") == "webhook"
    assert external_source("mail", {"source": 1}, None) == "webhook"
    # "trimmed" is JavaScript's trim: U+FEFF is whitespace, U+001F and U+0085 are not
    assert external_source("mail", {"source": "\ufeffgmail"}, None) == "gmail"
    assert external_source("mail", {"source": "\x1fgmail"}, None) == "webhook"
    assert external_source("mail", {"source": "gmail\x85"}, None) == "webhook"


# --- resolve with settings (config, presets, transforms) ----------------------------------------------


def test_gmail_preset_and_wrapping(tmp_path: Path) -> None:
    s = load(tmp_path, presets=["gmail"], allowRequestSessionKey=True, allowedSessionKeyPrefixes=["hook:"],
             gmail={"allowUnsafeExternalContent": True})
    msg = {"id": "abc", "from": "Ada", "subject": "Hi", "snippet": "sn", "body": "bd"}
    res = run(s, "gmail", {"source": "gmail", "messages": [msg, {"id": "other"}]})
    assert res.mapping.id == "gmail" and res.external_source == "gmail" and res.wrap is False
    a = res.action
    assert a.message == "New email from Ada\nSubject: Hi\nsn\nbd" and a.name == "Gmail"
    assert (a.session_key, a.session_key_source) == ("hook:gmail:abc", "mapping-templated")


def test_static_mapping_is_wrapped_and_webhook(tmp_path: Path) -> None:
    s = load(tmp_path, mappings=[{"match": {"path": "x"}, "messageTemplate": "m", "sessionKey": "hook:s",
                                  "allowUnsafeExternalContent": False}])
    res = run(s, "x", {})
    assert res.mapping.id == "mapping-1" and res.wrap is True and res.external_source == "webhook"
    assert res.action.session_key_source == "mapping-static"


def test_transform_results(tmp_path: Path) -> None:
    transform_file(tmp_path, "t.py", """
from hookgate.transforms import SKIP
def transform(ctx):
    mode = ctx.payload.get("mode")
    if mode == "skip":
        return SKIP
    if mode == "none":
        return None
    if mode == "wake":
        return {"kind": "wake", "text": "Ping " + ctx.headers["x-who"]}
    if mode == "raise":
        raise ValueError("boom")
    if mode == "bad":
        return ["not", "a", "dict"]
    if mode == "ctx":
        return {"message": f"{ctx.path}|{ctx.url}|{ctx.mapping_id}|{dict(ctx.query)}"}
    ctx.payload["mutated"] = True
    return {"message": "changed"}
def other(ctx):
    return {"message": "other export"}
default = "not callable"
""")
    s = load(tmp_path, mappings=[{"id": "t", "match": {"path": "t"}, "messageTemplate": "base",
                                  "transform": {"module": "t.py"}},
                                 {"id": "o", "match": {"path": "o"}, "messageTemplate": "base",
                                  "transform": {"module": "t.py", "export": "other"}}])
    loader = TransformLoader()
    assert run(s, "t", {"mode": "skip"}, loader).action is None
    assert run(s, "t", {"mode": "none"}, loader).action.message == "base"
    assert run(s, "t", {"mode": "wake"}, loader, {"x-who": "Ada"}).action == WakeAction("Ping Ada", "now")
    payload = {"mode": "merge"}
    assert run(s, "t", payload, loader).action.message == "changed"
    assert payload == {"mode": "merge"}  # the transform got a deep copy
    assert run(s, "o", {}, loader).action.message == "other export"
    for mode, kind in (("raise", "ValueError"), ("bad", "TransformResultError")):
        with pytest.raises(TransformFailed) as info:
            run(s, "t", {"mode": mode}, loader)
        assert info.value.kind == kind


def test_transform_context_is_read_only(tmp_path: Path) -> None:
    ctx = TransformContext({}, {}, {}, "p", "/hooks/p", "m")
    with pytest.raises(AttributeError):
        ctx.path = "x"  # type: ignore[misc]
    assert repr(SKIP) == "SKIP"


def test_transform_gets_lazy_read_only_headers_and_query(tmp_path: Path) -> None:
    """As the server passes them: built on first use (in the transform's thread), never writable."""
    transform_file(tmp_path, "h.py", """
def transform(ctx):
    if ctx.payload.get("look"):
        try:
            ctx.headers["x-new"] = "1"
        except TypeError:
            pass
        else:
            raise AssertionError("headers were writable")
        return {"message": f"{ctx.headers['x-who']}|{ctx.headers.get('missing')}|{dict(ctx.query)}|{len(ctx.headers)}"}
    return {"message": "did not look"}
""")
    s = load(tmp_path, mappings=[{"match": {"path": "h"}, "transform": {"module": "h.py"}}])
    built: list[str] = []

    def headers() -> dict[str, str]:
        built.append("headers")
        return request_headers([(b"X-Who", b"Ada"), (b"Accept", b"a"), (b"accept", b"b")])

    def query() -> dict[str, str]:
        built.append("query")
        return request_query(b"a=1&a=2")

    def resolve_with(payload: dict[str, Any]) -> Any:
        m = match_mapping(s.hooks.mappings, "h", payload)
        assert m is not None
        ctx = RequestContext(payload, Lazy(headers), Lazy(query), "h", "/hooks/h", 0)
        return asyncio.run(resolve(m, ctx, s, TransformLoader()))

    assert resolve_with({}).action.message == "did not look"
    assert built == []
    assert resolve_with({"look": True}).action.message == "Ada|None|{'a': '2'}|2"
    assert built == ["headers", "query"]
    assert repr(Lazy(lambda: {"k": "v"})) == "{'k': 'v'}"


def test_export_lookup_and_missing_module(tmp_path: Path) -> None:
    transform_file(tmp_path, "d.py", "def default(ctx):\n    return {'message': 'from default'}\n")
    transform_file(tmp_path, "none.py", "transform = 5\n")
    s = load(tmp_path, mappings=[{"match": {"path": "d"}, "transform": {"module": "d.py"}},
                                 {"match": {"path": "n"}, "transform": {"module": "none.py"}},
                                 {"match": {"path": "e"}, "transform": {"module": "d.py", "export": "nope"}},
                                 {"match": {"path": "later"}, "transform": {"module": "later.py"}}])
    assert "hook transform module not found: " + str(tmp_path / "hooks/transforms/later.py") in s.warnings
    loader = TransformLoader()
    assert run(s, "d", {}, loader).action.message == "from default"
    for sub in ("n", "e"):
        with pytest.raises(TransformFailed, match="must export a function"):
            run(s, sub, {}, loader)
    with pytest.raises(TransformFailed, match="not found"):
        run(s, "later", {}, loader)
    transform_file(tmp_path, "later.py", "def transform(ctx):\n    return {'message': 'now here'}\n")
    assert run(s, "later", {}, loader).action.message == "now here"


def test_a_file_that_could_not_be_read_is_read_again_next_time(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing import is kept until the file changes — but not a failure to read the file itself
    (no descriptor left under a connection flood): that one passes, and kept, it failed every later
    request until the file was edited or the config reloaded."""
    from hookgate.hooks import transforms_loader

    transform_file(tmp_path, "t.py", "def transform(ctx):\n    return {'message': 'read'}\n")
    s = load(tmp_path, mappings=[{"match": {"path": "t"}, "transform": {"module": "t.py"}}])
    loader = TransformLoader()

    def no_descriptor(*_: Any, **__: Any) -> Any:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(transforms_loader, "open", no_descriptor, raising=False)
    with pytest.raises(TransformFailed, match="Too many open files"):
        run(s, "t", {}, loader)
    monkeypatch.undo()
    assert run(s, "t", {}, loader).action.message == "read"


def test_reimport_on_change(tmp_path: Path) -> None:
    f = transform_file(tmp_path, "r.py", "def transform(ctx):\n    return {'message': 'v1'}\n")
    s = load(tmp_path, mappings=[{"match": {"path": "r"}, "transform": {"module": "r.py"}}])
    loader = TransformLoader()
    assert run(s, "r", {}, loader).action.message == "v1"
    assert run(s, "r", {}, loader).action.message == "v1"
    f.write_text("def transform(ctx):\n    return {'message': 'v2'}\n")  # same size: mtime differs
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert run(s, "r", {}, loader).action.message == "v2"
    f.write_text("syntax error(\n")
    with pytest.raises(TransformFailed) as info:
        run(s, "r", {}, loader)
    assert info.value.kind == "SyntaxError"


def test_symlink_swapped_outside_after_load_is_refused(tmp_path: Path) -> None:
    inside = transform_file(tmp_path, "real.py", "def transform(ctx):\n    return {'message': 'in'}\n")
    link = tmp_path / "hooks" / "transforms" / "link.py"
    link.symlink_to(inside)
    s = load(tmp_path, mappings=[{"match": {"path": "l"}, "transform": {"module": "link.py"}}])
    loader = TransformLoader()
    assert run(s, "l", {}, loader).action.message == "in"
    outside = tmp_path / "evil.py"
    outside.write_text("def transform(ctx):\n    return {'message': 'evil!'}\n")
    link.unlink()
    link.symlink_to(outside)
    with pytest.raises(TransformFailed) as info:
        run(s, "l", {}, loader)
    assert info.value.kind == "ContainmentError"


def test_async_and_timeout(tmp_path: Path) -> None:
    transform_file(tmp_path, "a.py", """
import asyncio, time
async def transform(ctx):
    if ctx.payload.get("slow"):
        await asyncio.sleep(5)
    return {"message": "async"}
def blocking(ctx):
    time.sleep(1.0)
    return {"message": "late"}
""")
    s = load(tmp_path, transformTimeoutSeconds=0.2,
             mappings=[{"match": {"path": "a"}, "transform": {"module": "a.py"}},
                       {"match": {"path": "b"}, "transform": {"module": "a.py", "export": "blocking"}}])
    assert run(s, "a", {}).action.message == "async"
    started = time.monotonic()
    for sub, payload in (("a", {"slow": True}), ("b", {})):
        with pytest.raises(TransformFailed) as info:
            run(s, sub, payload)
        assert info.value.kind == "TimeoutError"
    assert time.monotonic() - started < 2.0


# --- containment at config load (§6.6, §9 example 15) --------------------------------------------------


def config_errors(tmp: Path, **hooks: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp, **hooks)
    return list(info.value.lines)


@pytest.mark.parametrize("module", ["../evil.py", "/etc/evil.py", "~/evil.py", "a/../../evil.py", "c:evil.py"])
def test_unsafe_module_paths(tmp_path: Path, module: str) -> None:
    assert ("hooks.mappings[0].transform.module: module must be a safe relative path (no absolute paths)"
            in config_errors(tmp_path, mappings=[{"transform": {"module": module}}]))


def test_transforms_dir_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "hooks" / "transforms"
    root.mkdir(parents=True)
    errs = config_errors(tmp_path, transformsDir="..", mappings=[{"transform": {"module": "x.py"}}])
    assert f"Hook transformsDir module path must be within {root}: .." in errs
    errs = config_errors(tmp_path, transformsDir="~", mappings=[{"transform": {"module": "x.py"}}])
    assert f"Hook transformsDir module path must be within {root}: ~" in errs
    outside = tmp_path / "outside.py"
    outside.write_text("def transform(ctx):\n    return None\n")
    (root / "link.py").symlink_to(outside)
    errs = config_errors(tmp_path, mappings=[{"transform": {"module": "link.py"}}])
    assert f"Hook transform module path must be within {root}: link.py" in errs
    (tmp_path / "elsewhere").mkdir()
    (root / "sub").symlink_to(tmp_path / "elsewhere")
    errs = config_errors(tmp_path, mappings=[{"transform": {"module": "sub/new.py"}}])
    assert f"Hook transform module path must be within {root}: sub/new.py" in errs
    errs = config_errors(tmp_path, transformsDir="sub", mappings=[{"transform": {"module": "x.py"}}])
    assert f"Hook transformsDir module path must be within {root}: sub" in errs
    (root / "real").mkdir()
    (root / "inner").symlink_to(root / "real")
    (root / "real" / "ok.py").write_text("def transform(ctx):\n    return None\n")
    s = load(tmp_path, transformsDir="inner", mappings=[{"transform": {"module": "ok.py"}}])
    assert s.hooks.mappings[0].transform_module == str(root / "inner" / "ok.py")


# --- hooks test (operations.md §1.7) --------------------------------------------------------------------


def test_hook_test_outcomes(tmp_path: Path) -> None:
    transform_file(tmp_path, "boom.py", "def transform(ctx):\n    raise KeyError('k')\n")
    s = load(tmp_path, mappings=[{"id": "w", "match": {"path": "w"}, "action": "wake",
                                  "textTemplate": "{{query.q}}{{headers.x-a}}"},
                                 {"id": "boom", "match": {"path": "boom"}, "transform": {"module": "boom.py"}},
                                 {"id": "empty", "match": {"path": "empty"}}])

    def t(name: str, body: bytes = b"{}", **kw: Any) -> dict[str, Any]:
        return asyncio.run(hook_test(s, name, body, kw.get("headers", []), kw.get("query", [])))

    assert t("w", query=[("q", "1"), ("q", "2")], headers=[("X-A", "b"), ("x-a", "c")]) == {
        "status": 200, "mapping": "w", "action": {"kind": "wake", "text": "2b, c", "mode": "now"}}
    assert t("boom") == {"status": 500, "mapping": "boom", "error": "hook mapping failed",
                         "exception": "KeyError: 'k'"}
    assert t("empty") == {"status": 400, "mapping": "empty", "error": "hook mapping requires message"}
    assert t("nothing") == {"status": 404, "mapping": None, "error": "Not Found"}
    assert t("w", b"{bad")["status"] == 400
    assert t("wake", b'{"text":"hi"}')["action"] == {"kind": "wake", "text": "hi", "mode": "now"}
    agent = t("agent", b'{"message":"hi","sessionKey":"x"}')
    assert agent == {"status": 400, "mapping": None, "error": agent["error"]}
    assert agent["error"].startswith("sessionKey is disabled")
    ok = t("agent", b'{"message":"hi","agentId":"hooks"}')
    assert ok["action"]["agentId"] == "hooks" and ok["action"]["storedSessionKey"].startswith("agent:hooks:hook:")


def test_an_edit_of_the_same_size_within_the_second_is_seen(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's bytecode cache trusts a whole-second mtime and the size: the loader compiles from the
    source, so a same-size edit right after the previous import still runs the new code."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the cache is in play, as by default
    f = transform_file(tmp_path, "t.py", "def transform(ctx):\n    return {'message': 'v1'}\n")
    s = load(tmp_path, mappings=[{"match": {"path": "t"}, "transform": {"module": "t.py"}}])
    loader = TransformLoader()
    assert run(s, "t", {}, loader).action.message == "v1"
    st = f.stat()
    f.write_text("def transform(ctx):\n    return {'message': 'v2'}\n")  # same size
    # the same second, a distinct nanosecond mtime: the loader sees a change, a .pyc check would not
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert run(s, "t", {}, loader).action.message == "v2"
