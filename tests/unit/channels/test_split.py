"""``split_text`` (model.md §10.2) and the pure error-classification helpers of the HTTP channels."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookgate.channels.base import MAX_CHARS, split_text
from hookgate.channels.http import (
    clip,
    describe,
    dig,
    mask,
    parse_retry_after,
    retryable_status,
    standard_webhooks_signature,
)

# --- split_text -----------------------------------------------------------------------------------


def test_text_within_the_limit_is_one_unchanged_part() -> None:
    assert split_text("a b\n\nc", 7) == ["a b\n\nc"]
    assert split_text("x" * 10, 10) == ["x" * 10]  # exactly the limit: no split


def test_no_limit_means_one_part() -> None:
    assert split_text("y" * 100_000, None) == ["y" * 100_000]
    assert MAX_CHARS["webhook"] is None and MAX_CHARS["console"] is None


def test_blank_line_wins_over_newline_and_space() -> None:
    text = "aaa bbb\n\nccc\nddd eee"  # blank line at 7, newline at 12, spaces at 3 and 16
    assert split_text(text, 16) == ["aaa bbb", "ccc\nddd eee"]


def test_newline_wins_over_space_when_there_is_no_blank_line() -> None:
    assert split_text("aaa bbb\nccc ddd", 12) == ["aaa bbb", "ccc ddd"]


def test_space_when_there_is_no_newline() -> None:
    assert split_text("aaa bbb ccc", 8) == ["aaa bbb", "ccc"]


def test_a_run_without_separator_is_cut_hard_at_the_limit() -> None:
    assert split_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]


def test_the_separator_may_sit_exactly_at_the_limit() -> None:
    # the part before the space is exactly the limit long
    assert split_text("abcd efgh", 4) == ["abcd", "efgh"]
    assert split_text("abcd\n\nefgh", 4) == ["abcd", "efgh"]


def test_a_separator_just_past_the_limit_does_not_count() -> None:
    assert split_text("abcde fg", 4) == ["abcd", "e fg"]


def test_no_empty_parts_from_runs_of_separators() -> None:
    parts = split_text("a\n\n\n\n\n\nb" + "\n" * 10 + "c", 3)
    assert parts == ["a", "b", "c"]


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=300), st.integers(1, 40))
def test_parts_respect_the_limit_and_are_never_empty(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    if len(text) <= limit:
        assert parts == [text]
        return
    assert parts and all(p and len(p) <= limit for p in parts)
    # only separators are dropped: the non-space characters survive, in order
    assert "".join(parts).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")


# --- classification helpers -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert retryable_status(status)


@pytest.mark.parametrize("status", [200, 301, 400, 401, 403, 404, 409, 410, 413, 422, 600])
def test_final_statuses(status: int) -> None:
    assert not retryable_status(status)


def test_retry_after_in_seconds() -> None:
    assert parse_retry_after("120", now=0) == 120
    assert parse_retry_after(" 1.5 ", now=0) == 1.5
    # delay-seconds are digits (RFC 9110 §10.2.3): a negative one is no value, and the usual backoff
    # applies (it was 0: a retry at once, the next attempt's minimum wait)
    assert parse_retry_after("-3", now=0) is None


def test_retry_after_as_an_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 90, usegmt=True)
    assert parse_retry_after(header, now=now) == pytest.approx(90)
    past = email.utils.formatdate(now - 90, usegmt=True)
    assert parse_retry_after(past, now=now) == 0


@pytest.mark.parametrize("value", [None, "", "  ", "soon", "nan", "inf"])
def test_unusable_retry_after(value: str | None) -> None:
    assert parse_retry_after(value, now=0) is None


def test_describe_finds_each_api_s_error_text() -> None:
    assert describe({"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked"}) == (
        "Forbidden: bot was blocked")  # telegram
    assert describe({"ok": False, "error": "channel_not_found"}) == "channel_not_found"  # slack
    assert describe({"message": "Missing Access", "code": 50001}) == "Missing Access"  # discord
    assert describe({"error": {"message": "(#100) Invalid parameter", "code": 100}}) == (
        "(#100) Invalid parameter")  # whatsapp, google chat
    assert describe({"status": 500, "message": "Message Send Error",
                     "error": {"type": "iMessage Error", "error": "chat not found"}}) == "chat not found"
    assert describe({"unrelated": 1}) is None
    assert describe(["x"]) is None


def test_dig_walks_dicts_and_lists() -> None:
    answer = {"sentMessages": [{"id": "461"}], "result": {"message_id": 7}}
    assert dig(answer, "sentMessages", 0, "id") == "461"
    assert dig(answer, "result", "message_id") == 7
    assert dig(answer, "sentMessages", 1, "id") is None
    assert dig(answer, "result", 0) is None
    assert dig(None, "a") is None


def test_mask_and_clip() -> None:
    assert mask("bad token 123:ABC in 123:ABCDEF", ["123:ABC", "123:ABCDEF"]) == "bad token *** in ***"
    assert mask("nothing", [""]) == "nothing"
    assert clip("a \n\t b") == "a b"
    long = clip("x" * 500)
    assert len(long) == 200 and long.endswith("…")


def test_signature_matches_the_standard_webhooks_scheme() -> None:
    key = b"0123456789abcdef0123456789abcdef"
    secret = "whsec_" + base64.b64encode(key).decode()
    expected = base64.b64encode(hmac.new(key, b"msg_1.1700000000.{}", hashlib.sha256).digest()).decode()
    assert standard_webhooks_signature(secret, "msg_1", 1700000000, b"{}") == "v1," + expected
    # a secret without the prefix is used as raw bytes
    raw = base64.b64encode(hmac.new(b"plain", b"i.1.b", hashlib.sha256).digest()).decode()
    assert standard_webhooks_signature("plain", "i", 1, b"b") == "v1," + raw
