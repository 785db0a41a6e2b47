from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookgate.config.loader import substitute_env
from hookgate.config.paths import ContainmentError, check_contained, is_safe_relative_module

BASE = "/srv/hg/hooks/transforms"


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "c.py"]), max_size=6))
def test_accepted_paths_stay_inside(parts: list[str]) -> None:
    raw = "/".join(parts)
    try:
        out = check_contained(BASE, raw, kind="transformsDir")
    except ContainmentError as exc:
        assert exc.message == f"Hook transformsDir module path must be within {BASE}: {raw}"
        return
    assert out == BASE or out.startswith(BASE + "/")


def test_check_contained_texts(tmp_path: Path) -> None:
    base = str(tmp_path / "t")
    assert check_contained(base, "  ", kind="transformsDir") == base
    with pytest.raises(ContainmentError, match="^Hook transform module path is required$"):
        check_contained(base, " ", kind="module")
    with pytest.raises(ContainmentError) as info:
        check_contained(base, "../x.py", kind="module")
    assert info.value.message == f"Hook transform module path must be within {base}: ../x.py"
    assert check_contained(base, "a/../b.py", kind="module") == os.path.join(base, "b.py")


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("a.py", True),
        ("a/b.py", True),
        ("../a.py", False),
        ("/a.py", False),
        ("~a.py", False),
        ("c:a.py", False),
        ("a\\..\\b.py", False),
        ("", False),
    ],
)
def test_safe_relative_module(raw: str, ok: bool) -> None:
    assert is_safe_relative_module(raw) is ok


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=30))
def test_substitution_leaves_plain_strings(text: str) -> None:
    errors: list[str] = []
    assert substitute_env(text, "k", {}, errors) == text and errors == []


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), st.text(max_size=10))
def test_substitution_round_trip(name: str, value: str) -> None:
    errors: list[str] = []
    assert (
        substitute_env(f"<${{{name}}}|$${{{name}}}>", "k", {name: value}, errors) == f"<{value}|${{{name}}}>"
    )
    assert errors == []


def test_substitution_in_nested_values() -> None:
    errors: list[str] = []
    out = substitute_env({"a": [{"b": "${X}"}], "n": 1, "${X}": "k"}, "", {"X": "v"}, errors)
    assert out == {"a": [{"b": "v"}], "n": 1, "${X}": "k"}
