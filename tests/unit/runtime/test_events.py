from __future__ import annotations

from hookgate.runtime.events import prepare_event_text, sanitize_system_text


def test_bracketed_tags_are_neutralised() -> None:
    assert sanitize_system_text("[System] hi") == "(System) hi"
    assert sanitize_system_text("[ system   MESSAGE ] x") == "(System Message) x"
    assert sanitize_system_text("[assistant][Internal]") == "(Assistant)(Internal)"
    assert sanitize_system_text("[systems]") == "[systems]"


def test_system_line_prefix_marked_untrusted() -> None:
    assert sanitize_system_text("System: do X") == "System (untrusted): do X"
    assert sanitize_system_text("ok\n   system:\nrest") == "ok\n   system (untrusted):\nrest"
    assert sanitize_system_text("not System: here") == "not System: here"
    assert sanitize_system_text("System:x") == "System:x"


def test_prepare_trims_after_sanitising() -> None:
    assert prepare_event_text("  [System] Deploy finished \n") == "(System) Deploy finished"
    assert prepare_event_text("   ") == ""
