from __future__ import annotations

import ipaddress

from hookgate.edge.clientip import client_ip, normalize_peer, parse_ip

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::/32"))


def test_peer_normalisation_folds_mapped_ipv4_and_lowercases_ipv6() -> None:
    assert normalize_peer("::ffff:1.2.3.4") == "1.2.3.4"
    assert normalize_peer("2001:DB8::1") == "2001:db8::1"
    assert normalize_peer("fe80::1%eth0") == "fe80::1"
    assert normalize_peer(None) == "unknown"
    assert normalize_peer("") == "unknown"


def test_parse_ip_strips_brackets_and_ports() -> None:
    assert str(parse_ip(" [2001:db8::5]:443 ")) == "2001:db8::5"
    assert str(parse_ip("1.2.3.4:8080")) == "1.2.3.4"
    assert parse_ip("not-an-ip") is None
    assert parse_ip("") is None


def test_untrusted_peer_ignores_forwarded_headers() -> None:
    assert client_ip("203.0.113.9", "1.1.1.1", "2.2.2.2", PROXIES, True) == "203.0.113.9"


def test_no_proxies_configured_uses_peer() -> None:
    assert client_ip("10.1.1.1", "1.1.1.1", None, (), False) == "10.1.1.1"


def test_forwarded_for_walked_right_to_left_skipping_proxies_loopback_and_garbage() -> None:
    xff = "198.51.100.7, 203.0.113.5, junk, 127.0.0.1, 10.2.2.2"
    assert client_ip("10.0.0.1", xff, None, PROXIES, False) == "203.0.113.5"


def test_forwarded_entries_with_ports_and_brackets() -> None:
    assert client_ip("10.0.0.1", "[2001:db9::1]:1234", None, PROXIES, False) == "2001:db9::1"
    assert client_ip("10.0.0.1", "198.51.100.7:5555", None, PROXIES, False) == "198.51.100.7"


def test_real_ip_fallback_only_when_enabled() -> None:
    assert client_ip("10.0.0.1", "10.0.0.2, 127.0.0.1", "198.51.100.1", PROXIES, True) == "198.51.100.1"
    assert client_ip("10.0.0.1", "10.0.0.2", "198.51.100.1", PROXIES, False) == "10.0.0.1"
    assert client_ip("10.0.0.1", None, "garbage", PROXIES, True) == "10.0.0.1"


def test_mapped_ipv4_peer_matches_ipv4_proxy_cidr() -> None:
    assert client_ip("::ffff:10.0.0.1", "198.51.100.8", None, PROXIES, False) == "198.51.100.8"
