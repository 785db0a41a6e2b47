from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakeapi import FakeApi


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as client:  # as the worker builds it
        yield client
