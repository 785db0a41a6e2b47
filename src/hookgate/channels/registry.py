"""One factory from a channel's settings to its adapter (model.md §10.1 ids)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hookgate.channels.base import ChannelAdapter
from hookgate.channels.local import ConsoleAdapter, FileAdapter
from hookgate.config.settings import ChannelSettings

if TYPE_CHECKING:
    import httpx


LOCAL_CHANNELS = frozenset({"console", "file", "irc"})  # every other channel is an HTTP adapter


def speaks_http(cfg: ChannelSettings) -> bool:
    return cfg.id not in LOCAL_CHANNELS


def build_adapter(cfg: ChannelSettings, http: httpx.AsyncClient | Callable[[], httpx.AsyncClient]) -> ChannelAdapter:
    """The adapter for ``cfg.id``; the HTTP ones share ``http`` (owned and closed by the caller), or
    the client ``http()`` returns: called only for an HTTP adapter, so the local and IRC channels
    never load or create one."""
    if cfg.id == "irc":
        from hookgate.channels.irc import IrcAdapter  # plain asyncio streams; loaded only when used

        return IrcAdapter(cfg)
    if cfg.id == "console":
        return ConsoleAdapter(cfg)
    if cfg.id == "file":
        return FileAdapter(cfg)
    from hookgate.channels.http import HTTP_ADAPTERS  # httpx: loaded only when an HTTP channel is used

    adapter = HTTP_ADAPTERS.get(cfg.id)
    if adapter is None:
        raise ValueError(f"no adapter for channel {cfg.id!r}")
    return adapter(cfg, http() if callable(http) else http)
