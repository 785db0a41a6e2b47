"""An API's error text without the delivered text it quoted (operations.md §2: delivered text is never logged)."""

from __future__ import annotations

import pytest

from hookgate.channels.http import mask_echo


@pytest.mark.parametrize(
    ("message", "text", "expected"),
    [
        ("HTTP 400: rejected quarterly numbers are up 12%", "quarterly numbers are up 12%", "HTTP 400: rejected [text]"),
        # a quoted prefix (an API that quotes the first characters), and a piece in the middle
        ("HTTP 400: bad text 'the deploy of api-v2 wen…'", "the deploy of api-v2 went fine, 3 hosts",
         "HTTP 400: bad text '[text]…'"),
        ("x: chat not found", "hi there", "x: chat not found"),  # nothing quoted
        ("x: bad text secret!!", "secret!!", "x: bad text [text]"),  # a short text quoted whole
        ("x: not ok", "ok", "x: not ok"),  # too short to tell a quote from a word
        ("x: error in field", "error", "x: error in field"),
        # the message was clip()ped: the text's newlines are spaces there, and matched so
        ("x: invalid: pin 4711 acct 99-123 user bob", "pin 4711\nacct 99-123\nuser bob", "x: invalid: [text]"),
        # two separate quotes, each masked
        ("x: 'first line of it' and 'the second line'", "first line of it\nthe second line",
         "x: '[text]' and '[text]'"),
        ("x: HTTP 413", "   ", "x: HTTP 413"),
    ],
)
def test_mask_echo(message: str, text: str, expected: str) -> None:
    assert mask_echo(message, text) == expected
