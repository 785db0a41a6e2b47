from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hookgate.edge.http import remove_dot_segments, request_id
from hookgate.edge.request import bearer_token, secrets_equal


def test_bearer_extraction() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("  bEaReR   abc  ") == "abc"
    assert bearer_token("Bearer ") is None
    assert bearer_token("Bearer") is None
    assert bearer_token("Basic abc") is None
    assert bearer_token(None) is None


def test_secrets_equal_is_exact() -> None:
    assert secrets_equal("hook-secret", b"hook-secret")
    assert not secrets_equal("hook-secret ", b"hook-secret")
    assert not secrets_equal("hook-secre", b"hook-secret")
    assert not secrets_equal("hook-secret\0", b"hook-secret")  # padding never makes lengths match
    assert not secrets_equal("", b"hook-secret")
    assert not secrets_equal(None, b"hook-secret")
    assert not secrets_equal("x", b"")
    # header values are read as UTF-8 (Request.text_header) and compared as UTF-8 bytes
    assert secrets_equal("ключ", "ключ".encode())
    assert secrets_equal("voilà", "voilà".encode())
    assert not secrets_equal("ключ".encode().decode("latin-1"), "ключ".encode())
    # a header that was not valid UTF-8 (U+FFFD in its reading) never reproduces the secret's bytes
    assert not secrets_equal(b"\xff\xfe".decode("utf-8", "replace"), b"\xff\xfe")


def test_request_id_echo_rules() -> None:
    assert request_id(b"abc-123_X.y:z") == "abc-123_X.y:z"
    assert request_id(b"a" * 128) == "a" * 128
    generated = request_id(b"a" * 129)
    assert generated != "a" * 129 and len(generated) == 24
    assert request_id(b"has space") != "has space"
    assert request_id(None) != request_id(None)


def test_dot_segments_removed_but_escapes_kept() -> None:
    assert remove_dot_segments("/hooks/./wake") == "/hooks/wake"
    assert remove_dot_segments("/hooks/x/../wake") == "/hooks/wake"
    assert remove_dot_segments("/a/b/../../hooks/wake") == "/hooks/wake"
    assert remove_dot_segments("/../hooks/wake") == "/hooks/wake"
    assert remove_dot_segments("/hooks/%77ake") == "/hooks/%77ake"
    assert remove_dot_segments("/hooks/.") == "/hooks/"
    assert remove_dot_segments("/hooks//wake") == "/hooks//wake"


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "%2e"]), max_size=8))
def test_dot_segments_never_leave_dots(segments: list[str]) -> None:
    out = remove_dot_segments("/" + "/".join(segments))
    assert out.startswith("/")
    assert "/./" not in out + "/" and "/../" not in out + "/"
