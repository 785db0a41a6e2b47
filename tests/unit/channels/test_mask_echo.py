"""An API's error text without the delivered text it quoted (operations.md §2: delivered text is never logged)."""

from __future__ import annotations

import json

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
        # quoted as a JSON string's contents: the lines joined by an escaped newline, short lines too
        ('mattermost: HTTP 400: invalid post: {"channel_id":"x","message":"echo: pw: hunter2\\nuser: bob\\nhost: db1"}',
         "echo: pw: hunter2\nuser: bob\nhost: db1",
         'mattermost: HTTP 400: invalid post: {"channel_id":"x","message":"[text]"}'),
        # non-ASCII escaped as \uXXXX (Python's json.dumps): the whole reply, not only its ASCII start
        ('discord: HTTP 400: bad content: "echo: \\u79d8\\u5bc6\\u306e\\u30d1\\u30b9\\u30ef\\u30fc\\u30c9"',
         "echo: 秘密のパスワード", 'discord: HTTP 400: bad content: "[text]"'),
        # Go's encoder (Mattermost): <, > and & as \u003c, \u003e, \u0026
        ('x: HTTP 400: "deploy \\u003cprod\\u003e \\u0026 restart\\nok: yes"', "deploy <prod> & restart\nok: yes",
         'x: HTTP 400: "[text]"'),
        # PHP's: / as \/
        ('x: HTTP 422: "see https:\\/\\/example.com\\/a\\/b now"', "see https://example.com/a/b now",
         'x: HTTP 422: "[text]"'),
        # a text too short to tell apart (whitespace only): its escaped form is not masked either
        ('x: got "\\n\\n\\n\\n\\n\\n"', "\n" * 6, 'x: got "\\n\\n\\n\\n\\n\\n"'),
        # a short text quoted escaped, whole
        ('x: bad "p\\u00e4ss w\\u00f6rd"', "päss wörd", 'x: bad "[text]"'),
    ],
)
def test_mask_echo(message: str, text: str, expected: str) -> None:
    assert mask_echo(message, text) == expected


def test_mask_echo_of_a_text_escaped_twice() -> None:
    """An API whose error is JSON quoting the JSON body it got: the text escaped twice, masked whole."""
    text = 'line one of it\nline two, "quoted" \u00e9t\u00e9'
    for ascii_only in (False, True):
        quoted = json.dumps(json.dumps({"text": text}, ensure_ascii=ascii_only), ensure_ascii=ascii_only)
        assert mask_echo(f"x: HTTP 400: {quoted}", text) == 'x: HTTP 400: "{\\"text\\": \\"[text]\\"}"'
