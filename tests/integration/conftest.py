from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gateway import GatewayFactory, RunningGateway, hooks_config


@pytest.fixture
def gateway_factory(tmp_path: Path) -> Iterator[GatewayFactory]:
    started: list[RunningGateway] = []

    def make(config: dict[str, Any] | str | None = None, *, start: bool = True, env: dict[str, str] | None = None,
             args: tuple[str, ...] = ()) -> RunningGateway:
        gw = RunningGateway(tmp_path, config if config is not None else hooks_config(), env)
        started.append(gw)
        return gw.start(*args) if start else gw

    yield make
    for gw in started:
        gw.stop()


@pytest.fixture
def gateway(gateway_factory: GatewayFactory) -> RunningGateway:
    return gateway_factory()

