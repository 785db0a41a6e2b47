from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from hookgate.runtime import prompts
from hookgate.runtime.prompts import (
    DEFAULT_HEARTBEAT_PROMPT,
    DELIVERY_LINE,
    HostZone,
    envelope_time,
    format_offset,
    heartbeat_prompt,
    heartbeat_skipped,
    hook_prompt,
    render_events,
    source_label,
    task_prompt,
    time_block,
    zone_for,
)
from hookgate.runtime.wrapper import wrap_external

MARKER_ID = "0123456789abcdef"


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 1000


WINTER = ms(2026, 11, 22, 6, 46, 40) + 123  # milliseconds are dropped, never rounded
SUMMER = ms(2026, 7, 1, 12, 0, 5)


@pytest.mark.parametrize(
    ("setting", "when", "expected"),
    [
        ("utc", WINTER, "2026-11-22 06:46:40 UTC"),
        ("UTC", WINTER, "2026-11-22 06:46:40 UTC"),
        ("Europe/Berlin", WINTER, "2026-11-22 07:46:40 CET"),
        ("Europe/Berlin", SUMMER, "2026-07-01 14:00:05 CEST"),
        ("Asia/Kolkata", WINTER, "2026-11-22 12:16:40 IST"),
        ("America/Sao_Paulo", WINTER, "2026-11-22 03:46:40 UTC-03:00"),
        ("Asia/Kathmandu", WINTER, "2026-11-22 12:31:40 UTC+05:45"),
        ("America/New_York", SUMMER, "2026-07-01 08:00:05 EDT"),
    ],
)
def test_envelope_time(setting: str, when: int, expected: str) -> None:
    assert envelope_time(when, setting) == expected


def test_format_offset() -> None:
    assert format_offset(timedelta(hours=5, minutes=30)) == "UTC+05:30"
    assert format_offset(timedelta(hours=-3)) == "UTC-03:00"
    assert format_offset(timedelta(hours=-3, minutes=-30)) == "UTC-03:30"
    assert format_offset(timedelta(0)) == "UTC+00:00"


def test_time_block() -> None:
    assert time_block(WINTER, "Europe/Berlin") == (
        "Current time: 2026-11-22 07:46:40 CET (Europe/Berlin)\nReference UTC: 2026-11-22 06:46 UTC"
    )
    assert time_block(WINTER, "utc") == (
        "Current time: 2026-11-22 06:46:40 UTC (UTC)\nReference UTC: 2026-11-22 06:46 UTC"
    )
    assert time_block(WINTER, "America/Sao_Paulo") == (
        "Current time: 2026-11-22 03:46:40 UTC-03:00 (America/Sao_Paulo)\nReference UTC: 2026-11-22 06:46 UTC"
    )


def test_unknown_zone_raises() -> None:
    with pytest.raises(ValueError, match='unknown time zone "Mars/Olympus"'):
        zone_for("Mars/Olympus")


def test_local_uses_tz_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", ":Europe/Berlin")
    assert zone_for("local").name == "Europe/Berlin"
    assert envelope_time(WINTER, "local") == "2026-11-22 07:46:40 CET"
    monkeypatch.setenv("TZ", "/usr/share/zoneinfo/Asia/Kolkata")
    assert zone_for("local").name == "Asia/Kolkata"
    monkeypatch.setenv("TZ", "Etc/UTC")
    assert zone_for("local").name == "UTC"
    assert time_block(WINTER, "local").endswith("UTC (UTC)\nReference UTC: 2026-11-22 06:46 UTC")


def test_local_without_iana_name_uses_host_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "XST-5:30")  # a POSIX rule: no IANA name
    time.tzset()
    try:
        zone = zone_for("local")
        assert isinstance(zone.tz, HostZone)
        assert zone.name == "UTC+05:30"
        assert envelope_time(WINTER, "local") == "2026-11-22 12:16:40 XST"
        assert time_block(WINTER, "local") == (
            "Current time: 2026-11-22 12:16:40 XST (UTC+05:30)\nReference UTC: 2026-11-22 06:46 UTC"
        )
        aware = datetime.fromtimestamp(WINTER // 1000, zone.tz)
        assert aware.utcoffset() == timedelta(hours=5, minutes=30)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_local_reads_etc_localtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TZ", raising=False)
    monkeypatch.setattr(os, "readlink", lambda path: "/usr/share/zoneinfo/posix/Asia/Kolkata")
    assert prompts.host_zone_name() == "Asia/Kolkata"


def test_render_events_multi_line() -> None:
    events = [(WINTER, "Deploy finished"), (SUMMER, "Line one\nLine two\r\nLine three")]
    assert render_events(events, "Europe/Berlin") == (
        "System: [2026-11-22 07:46:40 CET] Deploy finished\n"
        "System: [2026-07-01 14:00:05 CEST] Line one\n"
        "System: Line two\n"
        "System: Line three"
    )
    assert render_events([], "utc") == ""


def expected_wrapper(message: str, name: str, job_id: str, label: str) -> str:
    return wrap_external(
        message,
        name=name,
        job_id=job_id,
        received="2026-11-22 07:46:40 CET",
        source_label=label,
        marker_id=MARKER_ID,
    )


BLOCK = "Current time: 2026-07-01 14:00:05 CEST (Europe/Berlin)\nReference UTC: 2026-07-01 12:00 UTC"


def hook(*, wrap: bool, deliver: bool, source: str = "webhook", message: str = "Merged PR #42") -> str:
    return hook_prompt(
        run_id="run-1",
        name="GitHub",
        message=message,
        received_ms=WINTER,
        now_ms=SUMMER,
        tz_setting="Europe/Berlin",
        wrap=wrap,
        source=source,
        deliver=deliver,
        marker_id=MARKER_ID,
    )


def test_hook_prompt_wrapped_without_delivery() -> None:
    wrapped = expected_wrapper("Merged PR #42", "GitHub", "run-1", "Webhook")
    assert hook(wrap=True, deliver=False) == f"{wrapped}\n\n{BLOCK}"
    assert wrapped.startswith("Task: GitHub | Job ID: run-1 | Received: 2026-11-22 07:46:40 CET\n")


def test_hook_prompt_wrapped_with_delivery() -> None:
    wrapped = expected_wrapper("Merged PR #42", "GitHub", "run-1", "Webhook")
    assert hook(wrap=True, deliver=True) == f"{wrapped}\n\n{BLOCK}\n\n{DELIVERY_LINE}"
    assert DELIVERY_LINE == "Return your response as plain text; it will be delivered automatically."


def test_hook_prompt_gmail_label() -> None:
    out = hook(wrap=True, deliver=False, source="gmail")
    assert "\nSource: Email\n---\nMerged PR #42\n" in out


def test_hook_prompt_unwrapped() -> None:
    assert hook(wrap=False, deliver=False) == f"[hook:run-1 GitHub] Merged PR #42\n{BLOCK}"
    assert hook(wrap=False, deliver=True) == f"[hook:run-1 GitHub] Merged PR #42\n{BLOCK}\n\n{DELIVERY_LINE}"
    # Unsafe content is passed through as is; only the name is sanitised.
    raw = "<<<EXTERNAL_UNTRUSTED_CONTENT>>> <s>"
    assert hook(wrap=False, deliver=False, message=raw).startswith(f"[hook:run-1 GitHub] {raw}\n")


def test_source_label() -> None:
    assert source_label("webhook") == "Webhook"
    assert source_label("gmail") == "Email"
    with pytest.raises(ValueError, match="sms"):
        source_label("sms")


def test_task_prompt() -> None:
    out = task_prompt(
        task_id="task-7",
        label="Nightly report",
        task="Summarise the logs",
        received_ms=WINTER,
        now_ms=SUMMER,
        tz_setting="Europe/Berlin",
        marker_id=MARKER_ID,
    )
    assert (
        out == f"{expected_wrapper('Summarise the logs', 'Nightly report', 'task-7', 'Webhook')}\n\n{BLOCK}"
    )
    assert DELIVERY_LINE not in out


@pytest.mark.parametrize("label", [None, "", "   "])
def test_task_prompt_default_name(label: str | None) -> None:
    out = task_prompt(
        task_id="task-7", label=label, task="t", received_ms=WINTER, now_ms=SUMMER, tz_setting="utc"
    )
    assert out.startswith("Task: Task | Job ID: task-7 | Received: 2026-11-22 06:46:40 UTC\n")


def test_heartbeat_prompt() -> None:
    assert DEFAULT_HEARTBEAT_PROMPT == (
        "Review the system events above, if any. If something needs the user's attention, reply with a "
        "short message for them. If nothing needs attention, reply HEARTBEAT_OK."
    )
    events = "System: [2026-11-22 07:46:40 CET] Deploy finished"
    assert heartbeat_prompt(events, None) == f"{events}\n\n{DEFAULT_HEARTBEAT_PROMPT}"
    assert heartbeat_prompt(events, "Check the queue.") == f"{events}\n\nCheck the queue."
    assert heartbeat_prompt(events, "  ") == f"{events}\n\n{DEFAULT_HEARTBEAT_PROMPT}"
    assert heartbeat_prompt("", "Check the queue.") == "Check the queue."


def test_heartbeat_skipped() -> None:
    assert heartbeat_skipped("", None)
    assert heartbeat_skipped("", " ")
    assert not heartbeat_skipped("", "Check the queue.")
    assert not heartbeat_skipped("System: x", None)
