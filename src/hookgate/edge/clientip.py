"""Client IP (README §7): peer normalisation and the trusted-proxy ``X-Forwarded-For`` walk."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from functools import lru_cache

from hookgate.config.settings import IPNetwork

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(raw: str) -> IPAddress | None:
    """Parse one address: trimmed, brackets and ports removed, zone dropped, IPv4-mapped folded."""
    text = raw.strip()
    if not text:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]  # IPv4 with a port
    text = text.split("%", 1)[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@lru_cache(maxsize=4096)
def normalize_peer(host: str | None) -> str:
    """The socket peer as the limiter key: folded and lower-cased, or ``unknown``."""
    if not host:
        return "unknown"
    addr = parse_ip(host)
    return str(addr) if addr is not None else host.lower()


def _trusted(addr: IPAddress, proxies: Sequence[IPNetwork]) -> bool:
    return any(addr.version == net.version and addr in net for net in proxies)


def client_ip(
    peer: str | None,
    forwarded_for: str | None,
    real_ip: str | None,
    proxies: Sequence[IPNetwork],
    allow_real_ip_fallback: bool,
) -> str:
    """The client IP for limits and logs."""
    peer_key = normalize_peer(peer)
    if not proxies or peer_key == "unknown":
        return peer_key
    peer_addr = parse_ip(peer_key)
    if peer_addr is None or not _trusted(peer_addr, proxies):
        return peer_key
    if forwarded_for:
        for entry in reversed(forwarded_for.split(",")):
            addr = parse_ip(entry)
            if addr is None or addr.is_loopback or _trusted(addr, proxies):
                continue
            return str(addr)
    if allow_real_ip_fallback and real_ip:
        addr = parse_ip(real_ip)
        if addr is not None:
            return str(addr)
    return peer_key
