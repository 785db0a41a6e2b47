"""One factory from a channel's settings to its adapter (model.md §10.1 ids)."""

from __future__ import annotations

import httpx

from hookgate.channels.base import ChannelAdapter
from hookgate.channels.http import HTTP_ADAPTERS
from hookgate.channels.local import ConsoleAdapter, FileAdapter
from hookgate.config.settings import ChannelSettings


def build_adapter(cfg: ChannelSettings, http: httpx.AsyncClient) -> ChannelAdapter:
    """The adapter for ``cfg.id``; the HTTP ones share ``http`` (owned and closed by the caller)."""
    if cfg.id == "irc":
        from hookgate.channels.irc import IrcAdapter  # plain asyncio streams; loaded only when used

        return IrcAdapter(cfg)
    if cfg.id == "console":
        return ConsoleAdapter(cfg)
    if cfg.id == "file":
        return FileAdapter(cfg)
    adapter = HTTP_ADAPTERS.get(cfg.id)
    if adapter is None:
        raise ValueError(f"no adapter for channel {cfg.id!r}")
    return adapter(cfg, http)
