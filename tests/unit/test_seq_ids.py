"""Flow and run ids made from sequence numbers (store/sqlite/seqids.py): UUID v4, invertible, keyed."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

from hookgate.store.sqlite.seqids import SeqIds, new_key

SEQS = [0, 1, 2, 3, 255, 256, 10**6, 2**61 - 1, 2**61, 2**63 - 1, 2**122 - 1]


@pytest.fixture
def ids() -> SeqIds:
    return SeqIds(new_key())


def test_every_id_is_a_canonical_uuid_v4_and_inverts_to_its_seq(ids: SeqIds) -> None:
    rng = random.Random(7)
    for seq in SEQS + [rng.getrandbits(122) for _ in range(2000)]:
        flow_id = ids.id_of(seq)
        parsed = uuid.UUID(flow_id)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == flow_id  # lowercase, dashed, 36 characters
        assert ids.seq_of(flow_id) == seq


def test_consecutive_seqs_give_unrelated_ids(ids: SeqIds) -> None:
    """Every one of the 122 free bits takes both values across 4 096 consecutive ids, about half the
    time each (a counter would leave the high bits fixed), and no two ids are equal."""
    values = [uuid.UUID(ids.id_of(seq)).int for seq in range(1, 4097)]
    assert len(set(values)) == len(values)
    free_bits = [b for b in range(128) if b not in (76, 77, 78, 79, 62, 63)]
    for bit in free_bits:
        ones = sum((v >> bit) & 1 for v in values)
        assert 1700 < ones < 2400, f"bit {bit} was set in {ones} of 4096 ids"
    # neighbours differ in about half their bits, never in a handful
    distances = [(a ^ b).bit_count() for a, b in itertools.pairwise(values)]
    assert min(distances) > 30
    assert 55 < sum(distances) / len(distances) < 67


def test_the_key_decides_the_ids() -> None:
    a, b = SeqIds(new_key()), SeqIds(new_key())
    assert [a.id_of(s) for s in range(1, 50)] != [b.id_of(s) for s in range(1, 50)]
    assert a.id_of(1) != b.id_of(1)
    same = SeqIds(bytes(range(32)))
    assert same.id_of(5) == SeqIds(bytes(range(32))).id_of(5)  # stored key → the same ids after a restart


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not-a-uuid",
        "00000000-0000-0000-0000-000000000000",  # version 0
        "6f1c2a4e-8b3d-1a7c-9e2f-0123456789ab",  # version 1
        "6f1c2a4e-8b3d-4a7c-7e2f-0123456789ab",  # NCS variant
        "6F1C2A4E-8B3D-4A7C-9E2F-0123456789AB",  # uppercase: ids are compared exactly
        "6f1c2a4e8b3d4a7c9e2f0123456789ab",  # no dashes
        "6f1c2a4e-8b3d-4a7c-9e2f-0123456789ag",
        "{6f1c2a4e-8b3d-4a7c-9e2f-0123456789a}",
        "6f1c2a4e-8b3d-4a7c-9e2f-0123456789ab ",
    ],
)
def test_text_that_is_no_lowercase_uuid_v4_has_no_seq(ids: SeqIds, text: str) -> None:
    assert ids.seq_of(text) is None


def test_the_key_must_be_32_bytes() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SeqIds(b"short")
