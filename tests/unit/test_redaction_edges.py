"""Edges of redaction: URL password masking that must not take a port and path for a password, a
configHash that still sees non-secret values, mask_echo on multi-line, many-piece and huge texts,
and a transform cut with its request whose error must not reach stderr."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from hookgate.channels.http import clip, mask_echo
from hookgate.config.render import config_hash, mask_url_password
from hookgate.hooks.transforms_loader import call_transform

# --- config/render.py mask_url_password ---------------------------------------------------------


def test_query_password_holding_an_at_sign_is_masked_whole() -> None:
    """A host with a port and a ``password=`` query parameter holding ``@``: the port is no "user:"
    prefix, and the whole query password is masked."""
    for dsn in ("postgresql://db.example.com:5432/app?user=u&password=p@xyz9",
                "postgresql://db:5432/app?password=p@xyz9&sslmode=require"):
        shown = mask_url_password(dsn)
        assert "xyz9" not in shown, shown


def test_port_and_path_with_an_at_sign_are_not_taken_for_a_password() -> None:
    """No userinfo at all, but a port and an "@" in the path (Mastodon-style ``/@user``, ``/users/@me``):
    nothing to mask."""
    for url in ("https://api.example.com:8443/v1/users/@me", "https://social.example:443/@alice"):
        assert mask_url_password(url) == url


def test_config_hash_still_tells_configs_with_different_plain_values_apart() -> None:
    """configHash lets a rollout be verified: a value `config show` redacts but that is no secret input
    (a header, a command's env) still changes it, and so does a URL's port or path."""
    a = {"channels": {"webhook": {"url": "https://h/x", "headers": {"X-Tenant": "blue"}}}}
    b = {"channels": {"webhook": {"url": "https://h/x", "headers": {"X-Tenant": "green"}}}}
    assert config_hash(a) != config_hash(b)
    c = {"channels": {"webhook": {"url": "https://h:8443/a/@x"}}}
    d = {"channels": {"webhook": {"url": "https://h:9443/b/@x"}}}
    assert config_hash(c) != config_hash(d)


# --- channels/http.py mask_echo --------------------------------------------------------------------


def _api_error(text: str) -> str:
    """What accept() builds from an API that quotes the text: clip() collapses whitespace, cuts at 200."""
    return "webhook: HTTP 400: " + clip(f"invalid message: {text}")


def test_mask_echo_catches_a_quoted_multiline_text() -> None:
    """clip() turns the text's newlines into spaces before mask_echo looks for it: a text of short
    lines (< 12 characters each) is still found."""
    text = "pin 4711\nacct 99-123\nuser bob\nroom 12b"
    message = mask_echo(_api_error(text), text)
    for line in text.splitlines():
        assert line not in message, message


def test_mask_echo_masks_every_quoted_line() -> None:
    """A quoted list of many lines: every one is masked, not only the first few."""
    text = "\n".join(f"item {i:02d} secret-{i:02d}" for i in range(12))
    message = mask_echo(_api_error(text), text)
    leaked = [line for line in text.splitlines() if line in message]
    assert not leaked, message


# --- hooks/transforms_loader.py _bounded -----------------------------------------------------------


async def test_a_transform_cut_with_its_request_does_not_report_its_error() -> None:
    """The request cancelled (drain cut) while an async transform runs: the transform task is cancelled
    and its outcome dropped, so a transform that answers the cancellation with an error leaves no
    "Task exception was never retrieved" report (with its payload-bearing message) to asyncio."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def transform(ctx: Any) -> Any:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise ValueError(f"could not handle {ctx['payload']}") from None

    request = asyncio.ensure_future(call_transform(transform, {"payload": "card 4111-1111"}, 5.0))
    await asyncio.sleep(0.05)
    request.cancel()
    try:
        await request
    except asyncio.CancelledError:
        pass
    for _ in range(5):
        await asyncio.sleep(0)
    del request
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert not reported, [str(c.get("exception")) for c in reported]
