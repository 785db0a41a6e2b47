"""Ids and random bytes of hookgate.clock."""

from __future__ import annotations

import re
import uuid

from hookgate.clock import new_id, random_bytes

UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_new_id_is_a_canonical_uuid_v4() -> None:
    ids = [new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        assert UUID4.fullmatch(value)
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == value


def test_new_ids_use_every_random_bit() -> None:
    # the 122 random bits vary: across many ids each hex digit outside the fixed ones takes many values
    ids = [new_id().replace("-", "") for _ in range(2000)]
    for pos in range(32):
        seen = {i[pos] for i in ids}
        if pos == 12:
            assert seen == {"4"}
        elif pos == 16:
            assert seen == set("89ab")
        else:
            assert len(seen) == 16


def test_random_bytes_cross_the_pool_boundary() -> None:
    chunks = [random_bytes(100) for _ in range(100)]  # 10 000 bytes: the 4 KiB pool refills twice
    assert all(len(c) == 100 for c in chunks)
    assert len(set(chunks)) == len(chunks)
