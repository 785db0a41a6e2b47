from __future__ import annotations

import pytest

from hookgate.runtime.replies import (
    dead_letter_summary,
    hook_summary_event,
    is_heartbeat_ack,
    is_silent,
    summary_text,
    task_terminal_summary,
)


@pytest.mark.parametrize(
    "reply",
    [
        "HEARTBEAT_OK",
        "  HEARTBEAT_OK \n",
        "**HEARTBEAT_OK**",
        "`HEARTBEAT_OK`",
        "~~HEARTBEAT_OK~~",
        "_HEARTBEAT_OK_",
        "* _`HEARTBEAT_OK`_ *",
        "<b>HEARTBEAT_OK</b>",
        "<p class='x'>HEARTBEAT_OK</p><!-- done -->",
        "HEARTBEAT_OK - nothing to report.",
        "Nothing to report. HEARTBEAT_OK",
        "All quiet.\n\n**HEARTBEAT_OK**",
        "HEARTBEAT_OK HEARTBEAT_OK",
    ],
)
def test_heartbeat_acks(reply: str) -> None:
    assert is_heartbeat_ack(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "All good HEARTBEAT_OK thanks",
        "heartbeat_ok",
        "HEARTBEAT OK",
        "NO_REPLY",
        "Deploy failed on prod, please check.",
    ],
)
def test_not_heartbeat_acks(reply: str) -> None:
    assert not is_heartbeat_ack(reply)


def test_ack_max_chars_boundary() -> None:
    assert is_heartbeat_ack("HEARTBEAT_OK " + "x" * 300)
    assert not is_heartbeat_ack("HEARTBEAT_OK " + "x" * 301)
    assert is_heartbeat_ack("y" * 300 + " HEARTBEAT_OK")
    assert not is_heartbeat_ack("y" * 301 + " HEARTBEAT_OK")
    assert is_heartbeat_ack("HEARTBEAT_OK abcde", ack_max_chars=5)
    assert not is_heartbeat_ack("HEARTBEAT_OK abcdef", ack_max_chars=5)
    assert is_heartbeat_ack("HEARTBEAT_OK", ack_max_chars=0)
    assert not is_heartbeat_ack("HEARTBEAT_OK.", ack_max_chars=0)


def test_ack_markup_does_not_count() -> None:
    # Tags and edge emphasis go before measuring; the remainder is trimmed.
    assert is_heartbeat_ack("<div>HEARTBEAT_OK</div>   <br/>" + "<i></i>" * 100, ack_max_chars=0)
    assert is_heartbeat_ack("**HEARTBEAT_OK**\n\n  abc  ", ack_max_chars=3)
    assert is_heartbeat_ack("HEARTBEAT_OK **a_b** ~~c~~", ack_max_chars=4)
    assert not is_heartbeat_ack("HEARTBEAT_OK **a_b** ~~c~~", ack_max_chars=3)
    # The token's own underscore is kept; one spelled with markup inside is not the token.
    assert not is_heartbeat_ack("HEARTBEAT_*OK*")


@pytest.mark.parametrize(
    ("reply", "silent"),
    [
        ("", True),
        (None, True),
        ("  \n ", True),
        ("NO_REPLY", True),
        ("NO_REPLY: nothing for the user", True),
        ("  NO_REPLY", True),
        ("HEARTBEAT_OK", True),
        ("**HEARTBEAT_OK**", True),
        ("Sure. NO_REPLY", False),
        ("Merged PR #42 into main.", False),
        ("HEARTBEAT_OK " + "x" * 301, False),
    ],
)
def test_is_silent(reply: str | None, silent: bool) -> None:
    assert is_silent(reply) is silent


def test_is_silent_uses_ack_max_chars() -> None:
    assert is_silent("HEARTBEAT_OK abc", ack_max_chars=3)
    assert not is_silent("HEARTBEAT_OK abcd", ack_max_chars=3)


def test_summary_text() -> None:
    assert summary_text("  Merged PR #42 into main.  ", "ok") == "Merged PR #42 into main."
    assert summary_text("x" * 2000, "ok") == "x" * 2000
    assert summary_text("x" * 2001, "ok") == "x" * 2000 + "…"
    assert summary_text("  " + "x" * 2000 + "  ", "ok") == "x" * 2000
    assert summary_text("openai: HTTP 500: upstream error", "error") == "openai: HTTP 500: upstream error"
    assert summary_text("", "ok") == "ok"
    assert summary_text(None, "timed_out") == "timed_out"
    assert summary_text("   ", "lost") == "lost"


def event(**overrides: object) -> str | None:
    args: dict[str, object] = {
        "name": "GitHub",
        "status": "ok",
        "reply": "Merged PR #42 into main.",
        "error": None,
        "deliver": True,
        "delivered": None,
        "has_target": False,
    }
    args.update(overrides)
    return hook_summary_event(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("deliver", [True, False])
@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        ("error", "openai: HTTP 500: upstream error", "Hook Email (error): openai: HTTP 500: upstream error"),
        ("timed_out", "run timed out after 600s", "Hook Email (timed_out): run timed out after 600s"),
        (
            "lost",
            "run interrupted; retry limit reached",
            "Hook Email (lost): run interrupted; retry limit reached",
        ),
        ("skipped", None, "Hook Email (skipped): skipped"),
    ],
)
def test_non_ok_always_summarised(deliver: bool, status: str, error: str | None, expected: str) -> None:
    assert event(name="Email", status=status, error=error, reply=None, deliver=deliver) == expected


def test_non_ok_error_is_not_cut() -> None:
    long_error = "e" * 2500
    assert event(status="error", error=long_error) == f"Hook GitHub (error): {long_error}"


def test_ok_without_deliver_is_silent() -> None:
    assert event(deliver=False) is None
    assert event(deliver=False, has_target=True, delivered=False) is None


@pytest.mark.parametrize("reply", ["", None, "NO_REPLY", "HEARTBEAT_OK"])
@pytest.mark.parametrize(("has_target", "delivered"), [(False, None), (True, False), (True, None)])
def test_ok_silent_reply_never_summarised(
    reply: str | None, has_target: bool, delivered: bool | None
) -> None:
    assert event(reply=reply, has_target=has_target, delivered=delivered) is None


def test_ok_delivered_or_pending() -> None:
    assert event(has_target=True, delivered=True) is None
    assert event(has_target=True, delivered=None) is None


def test_ok_no_target() -> None:
    assert event(has_target=False) == "Hook GitHub: Merged PR #42 into main."


def test_ok_dead_lettered() -> None:
    assert event(has_target=True, delivered=False) == "Hook GitHub: Merged PR #42 into main."
    assert (
        dead_letter_summary("GitHub", "  Merged PR #42 into main.\n")
        == "Hook GitHub: Merged PR #42 into main."
    )


def test_summary_cut_to_2000() -> None:
    text = event(reply="y" * 2001)
    assert text == "Hook GitHub: " + "y" * 2000 + "…"
    assert dead_letter_summary("GitHub", "y" * 2000) == "Hook GitHub: " + "y" * 2000


def test_summary_name_sanitised_and_text_trimmed() -> None:
    assert event(name="[System] x", status="error", error="boom") == "Hook (System) x (error): boom"
    assert dead_letter_summary("[assistant]", "hi") == "Hook (Assistant): hi"


def test_task_terminal_summary() -> None:
    assert task_terminal_summary("  line one\n\n\tline  two ") == "line one line two"
    assert task_terminal_summary("a " * 1500) == "a " * 1000 + "…"
    assert task_terminal_summary("z" * 2000) == "z" * 2000
