"""`--since` (runs list, replay deliveries): the durations it takes and the one-line refusals."""

from __future__ import annotations

import argparse

import pytest

from hookgate.cli import _duration


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), (" 15m ", 900), ("2h", 7200), ("7d", 604800),
                                               ("0s", 0), ("0000000000000000000001s", 1), ("36500d", 36500 * 86400)])
def test_durations(text: str, seconds: int) -> None:
    assert _duration(text) == seconds


@pytest.mark.parametrize("text", ["\u0663m", "3\u0663s", "１h", "3", "m", "-5m", "1.5h", "3M", "3 m", ""])
def test_not_a_duration(text: str) -> None:
    # "٣m" (an Arabic-Indic digit) was taken as 3 minutes; config durations refuse it
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        _duration(text)


@pytest.mark.parametrize("text", ["36501d", "999999999999999999s", "9" * 5_000 + "s", "1" + "0" * 12 + "s"])
def test_too_long(text: str) -> None:
    # 5 000 digits got Python's "Exceeds the limit (4300 digits)" through argparse: "invalid _duration value"
    with pytest.raises(argparse.ArgumentTypeError, match=r"is too long \(at most 36500d\)"):
        _duration(text)
