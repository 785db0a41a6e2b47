"""Flow and run ids of one SQLite database: UUID v4 strings computed from the row's sequence number.

A ``flowId`` and a ``runId`` are UUID v4s (model.md §1, §5.1): 122 bits that nobody can predict,
plus the version and variant bits. Drawn from the OS at random, every new flow or run put its id at
a random leaf of a unique index, and a group commit of 15 new rows wrote 15 random index pages to
the WAL (and later copied them into the database file). For flows that index was a fifth of what
``create_flow`` cost: without it the same code did 25 – 31 % more requests/s at 22 – 25 µs less CPU
per request; for runs, /hooks/agent did 13 % more (bench/README.md, sixteenth VM).

So in SQLite a new flow's or run's 122 bits are a keyed pseudorandom permutation of its ``seq`` (the
table's ``INTEGER PRIMARY KEY``): a balanced Feistel network of six rounds over two 61-bit halves,
each round's function keyed BLAKE2b (256-bit key per table, drawn from ``secrets`` when the
database is first opened and kept in it, table ``store_keys``). Without the key, ids look and are as
unpredictable as random ones (Luby–Rackoff: four rounds of a pseudorandom function already give a
strong pseudorandom permutation); distinct sequence numbers give distinct ids by construction; and
a lookup inverts the permutation and reads the row by its primary key, so no index on the id is
written or read. The row's stored id is still compared, so an id this database did not issue finds
nothing.
"""

from __future__ import annotations

import hashlib
import secrets

from hookgate.clock import uuid_text

ROUNDS = 6
_HALF = 61
_MASK = (1 << _HALF) - 1
_LOW62 = (1 << 62) - 1
_HEX = frozenset("0123456789abcdef")
KEY_BYTES = 32
MAX_SEQ = 1 << 63  # SQLite's integers are 64-bit signed: a larger seq is no row


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


class SeqIds:
    """``id_of(seq)`` and its inverse ``seq_of(text)`` under one key (one table of one database)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"an id key must be {KEY_BYTES} bytes")
        rounds = []
        for i in range(ROUNDS):  # round i hashes the byte i, then the 8-byte half: fixed-length inputs
            h = hashlib.blake2b(key=key, digest_size=8)
            h.update(bytes((i,)))
            rounds.append(h)
        self._rounds = tuple(rounds)
        self._reversed = tuple(reversed(rounds))

    def id_of(self, seq: int) -> str:
        """The UUID v4 string of sequence number ``seq`` (0 ≤ seq < 2**122)."""
        left, right = seq >> _HALF, seq & _MASK
        for base in self._rounds:
            h = base.copy()
            h.update(right.to_bytes(8, "little"))
            left, right = right, left ^ (int.from_bytes(h.digest(), "little") & _MASK)
        bits = (left << _HALF) | right  # 122 bits: 48 + 12 + 62 around the version and variant
        u = ((bits >> 74) << 80) | (0x4 << 76) | (((bits >> 62) & 0xFFF) << 64) | (0x2 << 62) | (bits & _LOW62)
        return uuid_text(f"{u:032x}")

    def seq_of(self, flow_id: str) -> int | None:
        """The sequence number the id ``flow_id`` (of a flow or a run) stands for, or ``None`` when it
        is no lowercase canonical UUID v4 (then this scheme did not make it)."""
        if (
            len(flow_id) != 36
            or flow_id[8] != "-" or flow_id[13] != "-" or flow_id[18] != "-" or flow_id[23] != "-"
            or flow_id[14] != "4" or flow_id[19] not in "89ab"
        ):
            return None
        x = flow_id[:8] + flow_id[9:13] + flow_id[14:18] + flow_id[19:23] + flow_id[24:]
        if not _HEX.issuperset(x):
            return None
        u = int(x, 16)
        bits = ((u >> 80) << 74) | (((u >> 64) & 0xFFF) << 62) | (u & _LOW62)
        left, right = bits >> _HALF, bits & _MASK
        for base in self._reversed:
            h = base.copy()
            h.update(left.to_bytes(8, "little"))
            left, right = right ^ (int.from_bytes(h.digest(), "little") & _MASK), left
        return (left << _HALF) | right
