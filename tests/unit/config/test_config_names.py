from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookgate.config.names import (
    is_templated,
    normalize_agent_id,
    normalize_channel_name,
    normalize_hooks_path,
    normalize_match_path,
    normalize_route_path,
    reserved_path_hit,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("MAIN", "main"),
        ("Bad Id!", "bad-id"),
        ("", "main"),
        ("   ", "main"),
        ("ops", "ops"),
        ("  Ops_1 ", "ops_1"),
        ("!!!", "main"),
        ("-x-", "x"),
        ("a" * 70, "a" * 64),
        ("é agent", "agent"),
    ],
)
def test_normalize_agent_id(raw: str, expected: str) -> None:
    assert normalize_agent_id(raw) == expected


@given(st.text())
def test_agent_id_is_idempotent_and_well_formed(raw: str) -> None:
    out = normalize_agent_id(raw)
    assert re.fullmatch(r"[a-z0-9_-]{1,64}", out)
    assert normalize_agent_id(out) == out


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "/hooks"),
        ("  ", "/hooks"),
        ("hooks///", "/hooks"),
        ("api/hooks/", "/api/hooks"),
        ("/", "/"),
        ("///", ""),
        ("/Hooks", "/Hooks"),
    ],
)
def test_normalize_hooks_path(raw: str, expected: str) -> None:
    assert normalize_hooks_path(raw) == expected


@given(st.text(alphabet="/ab", max_size=12))
def test_hooks_path_shape(raw: str) -> None:
    out = normalize_hooks_path(raw)
    assert out in ("", "/") or (out.startswith("/") and not out.endswith("/"))
    if out not in ("", "/"):
        assert normalize_hooks_path(out) == out


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", "/"), ("  ", "/"), ("a", "/a"), ("/a/", "/a"), ("/a//", "/a/"), ("/", "/"), ("//x", "//x")],
)
def test_normalize_route_path(raw: str, expected: str) -> None:
    assert normalize_route_path(raw) == expected


@given(st.text(alphabet="/aB%.", max_size=12))
def test_route_path_strips_at_most_one_slash(raw: str) -> None:
    out = normalize_route_path(raw)
    assert out.startswith("/")
    stripped = raw.strip()
    if stripped and len(out) > 1:
        assert out in (stripped, "/" + stripped, stripped[:-1], "/" + stripped[:-1])


@pytest.mark.parametrize(
    ("raw", "expected"), [(" /github/ ", "github"), ("/", None), ("", None), ("a/b", "a/b")]
)
def test_normalize_match_path(raw: str, expected: str | None) -> None:
    assert normalize_match_path(raw) == expected


@given(st.text(max_size=20))
def test_match_path_has_no_outer_slashes(raw: str) -> None:
    out = normalize_match_path(raw)
    assert out is None or (out and not out.startswith("/") and not out.endswith("/"))


def test_reserved_paths() -> None:
    assert reserved_path_hit("/metrics")
    assert reserved_path_hit("/healthz/x")
    assert not reserved_path_hit("/healthzz")
    assert reserved_path_hit("/METRICS", casefold=True)
    assert not reserved_path_hit("/METRICS")


def test_channel_aliases_and_templates() -> None:
    assert normalize_channel_name(" Teams ") == "msteams"
    assert normalize_channel_name("gchat") == "googlechat"
    assert normalize_channel_name("Telegram") == "telegram"
    assert is_templated("hook:{{ a.b }}")
    assert not is_templated("hook:{a}")
    assert not is_templated(None)
