"""Step 6 of a standard-webhooks route (webhooks.md §2.3): the timestamp window."""

from __future__ import annotations

import pytest

from hookgate.config.settings import RouteAuthSettings
from hookgate.webhooks.auth import PendingSignature, check_headers

AUTH = RouteAuthSettings(mode="standard-webhooks", secrets=("whsec_c2VjcmV0",), tolerance_seconds=5)


def headers(ts: int) -> dict[bytes, str]:
    return {b"webhook-id": "msg_1", b"webhook-timestamp": str(ts), b"webhook-signature": "v1,xyz"}


@pytest.mark.parametrize("now_s", [1_000.0, 1_000.5, 1_000.999])
@pytest.mark.parametrize(("offset", "accepted"), [(-6, False), (-5, True), (0, True), (5, True), (6, False)])
def test_tolerance_is_plus_minus_whole_seconds(now_s: float, offset: int, accepted: bool) -> None:
    """"within ±toleranceSeconds of now", both in unix seconds: the past edge is as wide as the future
    one whatever the fraction of the current second."""
    h = headers(1_000 + offset)
    verdict = check_headers(AUTH, h.get, compat=False, now_s=now_s)
    assert isinstance(verdict, PendingSignature) is accepted
