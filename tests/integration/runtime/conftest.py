from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from receiver import Receiver, running_receiver

sys.path.insert(0, str(Path(__file__).parent))  # workerkit, the helpers these tests share


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as rec:
        yield rec
