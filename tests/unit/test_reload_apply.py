"""A reload whose new config fails while being applied leaves the old one in force, whole (README §4:
"an invalid config is logged and the old one stays active"), and counts as a failed reload."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

from hookgate.config.loader import load_settings
from hookgate.edge.app import Gateway
from hookgate.server import Service
from hookgate.store.sqlite.backend import SqliteStore


def test_a_config_that_fails_to_apply_leaves_the_old_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "hookgate.json5"
    path.write_text('{hooks: {enabled: true, token: "old-token-123",'
                    ' mappings: [{match: {path: "w"}, action: "wake", textTemplate: "x"}]}}')
    old = load_settings(str(path), {})
    service = Service(old, lambda: old, bind=None, port=None, out=io.StringIO())
    service.gateway = Gateway(old, SqliteStore(tmp_path / "hookgate.db"), metrics=service.metrics)
    # a token no UTF-8 encoder takes (the loader refuses one since; a defect of the same kind)
    bad = dataclasses.replace(old, hooks=dataclasses.replace(old.hooks, token="new\ud800", mappings=()),
                              config_hash="new")
    service.reload_settings = lambda: bad

    asyncio.run(service._reload("test"))

    gw = service.gateway
    assert service.settings is old and gw.settings is old  # the mappings, /readyz's configHash
    assert gw.hooks_token == b"old-token-123"
    assert gw.settings.hooks.mappings and gw.settings.config_hash == old.config_hash
    reloads = service.metrics.config_reloads
    assert reloads.labels("failed")._value.get() == 1 and reloads.labels("ok")._value.get() == 0


def test_a_failure_late_in_applying_is_undone(tmp_path: Path) -> None:
    """The routes are applied after the token and the settings: a failure there must put those back."""
    path = tmp_path / "hookgate.json5"
    path.write_text('{hooks: {enabled: true, token: "old-token-123"}}')
    old = load_settings(str(path), {})
    path.write_text('{hooks: {enabled: true, token: "new-token-456"}}')
    new = load_settings(str(path), {})
    service = Service(old, lambda: new, bind=None, port=None, out=io.StringIO())
    gw = service.gateway = Gateway(old, SqliteStore(tmp_path / "hookgate.db"), metrics=service.metrics)
    assert gw.route_surface is not None
    routes_apply = gw.route_surface.apply_settings

    def failing(settings: object) -> None:
        if settings is new:
            raise RuntimeError("a defect")
        routes_apply(settings)  # type: ignore[arg-type]

    gw.route_surface.apply_settings = failing  # type: ignore[method-assign]

    asyncio.run(service._reload("test"))

    assert service.settings is old and gw.settings is old and gw.hooks_token == b"old-token-123"
    assert service.metrics.config_reloads.labels("failed")._value.get() == 1
