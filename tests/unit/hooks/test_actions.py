from __future__ import annotations

from typing import Any

import pytest

from hookgate.errors import RequestError
from hookgate.hooks.actions import (
    idempotency_key,
    normalize_channel,
    parse_agent,
    parse_wake,
    timeout_seconds,
    wake_mode,
)
from hookgate.hooks.payload import decode_hook_body

CHANNELS = ("telegram", "msteams", "console")


def error_of(fn: Any, *args: Any) -> str:
    with pytest.raises(RequestError) as info:
        fn(*args)
    return info.value.message


@pytest.mark.parametrize("payload", [{}, {"text": ""}, {"text": "   "}, {"text": 5}, {"text": None}])
def test_wake_without_usable_text(payload: dict[str, Any]) -> None:
    assert error_of(parse_wake, payload) == "text required"


def test_wake_text_trimmed_and_mode_rules() -> None:
    assert parse_wake({"text": "  Ping \n"}).text == "Ping"
    for mode in (None, "now", "NOW", "bogus", 1, "next-heartbeat "):
        assert wake_mode(mode) == "now"
    assert wake_mode("next-heartbeat") == "next-heartbeat"


def test_trimming_is_javascripts() -> None:
    # The spec's "trimmed" is String.prototype.trim: U+FEFF is whitespace, U+001F and U+0085 are not.
    assert decode_hook_body('{"text":"x"}\ufeff'.encode()) == {"text": "x"}
    assert decode_hook_body('\u2028 {"a":1} \u3000'.encode()) == {"a": 1}
    for junk in ("\x1f", "\u0085"):
        assert error_of(decode_hook_body, (junk + '{"a":1}').encode()).startswith("invalid JSON: ")
    assert parse_wake({"text": "\ufeff Ping \u00a0"}).text == "Ping"
    assert parse_wake({"text": "\x1f"}).text == "\x1f"
    assert error_of(parse_wake, {"text": "\ufeff\u2029"}) == "text required"
    assert parse_agent({"message": "\ufeffhi\ufeff", "channel": "\ufeffConsole "}, CHANNELS).message == "hi"
    assert normalize_channel("\ufeffConsole ", CHANNELS) == "console"


def test_agent_validation_order_message_channel_model() -> None:
    assert error_of(parse_agent, {"channel": "sms", "model": ""}, CHANNELS) == "message required"
    assert error_of(parse_agent, {"message": "hi", "channel": "sms", "model": ""}, CHANNELS) == (
        "channel must be last|telegram|msteams|console"
    )
    assert error_of(parse_agent, {"message": "hi", "model": ""}, CHANNELS) == "model required"


@pytest.mark.parametrize("model", ["", "  ", 5, None, False])
def test_agent_model_present_but_unusable(model: Any) -> None:
    assert error_of(parse_agent, {"message": "hi", "model": model}, ()) == "model required"


def test_channel_normalisation_and_aliases() -> None:
    assert normalize_channel(None, CHANNELS) == "last"
    assert normalize_channel("  ", CHANNELS) == "last"
    assert normalize_channel(" LAST ", CHANNELS) == "last"
    assert normalize_channel("Teams", CHANNELS) == "msteams"
    assert normalize_channel("telegram", CHANNELS) == "telegram"
    assert error_of(normalize_channel, "sms", ()) == "channel must be last"
    assert error_of(normalize_channel, 5, CHANNELS) == "channel must be last|telegram|msteams|console"
    assert error_of(normalize_channel, "imsg", CHANNELS).startswith("channel must be last|")


def test_agent_field_normalisation() -> None:
    a = parse_agent(
        {"message": " hi ", "name": " ", "agentId": " ops ", "wakeMode": "next-heartbeat", "sessionKey": " k ",
         "to": "", "deliver": "false", "thinking": " high ", "timeoutSeconds": 12.9, "unknown": 1},
        CHANNELS,
    )
    assert (a.message, a.name, a.agent_id, a.wake_mode, a.session_key) == ("hi", "Hook", "ops", "next-heartbeat", "k")
    assert a.session_key_source == "request"
    assert a.to is None and a.deliver is True and a.thinking == "high" and a.timeout_seconds == 12
    assert parse_agent({"message": "x", "deliver": False}, ()).deliver is False
    assert parse_agent({"message": "x", "deliver": 0}, ()).deliver is True


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1), (1.99, 1), (172_800, 172_800), (10**9, 172_800), (0, None), (-5, None), (0.5, None),
     ("30", None), (True, None), (None, None), (float("inf"), None)],
)
def test_timeout_seconds(value: Any, expected: int | None) -> None:
    assert timeout_seconds(value) == expected


def test_idempotency_key_precedence_and_length() -> None:
    assert idempotency_key(("  ", "h2", "h3"), {"idempotencyKey": "b"}) == "h2"
    assert idempotency_key((None, None, None), {"idempotencyKey": " b "}) == "b"
    assert idempotency_key((None, None, None), {"idempotencyKey": 5}) is None
    assert idempotency_key(("k" * 256,), {}) == "k" * 256
    assert idempotency_key(("k" * 257,), {"idempotencyKey": "b"}) is None


def test_body_decoding() -> None:
    assert decode_hook_body(b"") == {}
    assert decode_hook_body(b"  \n ") == {}
    assert decode_hook_body(b"\xef\xbb\xbf{\"a\":1}") == {"a": 1}
    assert decode_hook_body(b'{"a":1,"a":2}') == {"a": 2}
    assert decode_hook_body(b"[1,2]") == [1, 2]
    for scalar in (b"null", b"5", b'"text"', b"true"):
        assert decode_hook_body(scalar) == {}
    assert error_of(decode_hook_body, b"\xff\xfe") == "invalid JSON: body is not valid UTF-8"
    assert error_of(decode_hook_body, b"{bad").startswith("invalid JSON: ")
    assert error_of(decode_hook_body, b"{'a':1}").startswith("invalid JSON: ")
