"""Fixtures for the config tests: ``kit`` writes JSON5 configs and scripts into tmp_path and loads them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from hookgate.config.loader import load_settings
from hookgate.config.settings import Settings
from hookgate.errors import ConfigError


class Kit:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(
        self, config: dict[str, Any] | str, name: str = "hookgate.json5", directory: Path | None = None
    ) -> Path:
        path = (directory or self.root) / name
        path.write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
        return path

    def load(
        self, config: dict[str, Any] | str, env: dict[str, str] | None = None, directory: Path | None = None
    ) -> Settings:
        return load_settings(str(self.write(config, directory=directory)), env or {})

    def errors(
        self, config: dict[str, Any] | str, env: dict[str, str] | None = None, directory: Path | None = None
    ) -> list[str]:
        with pytest.raises(ConfigError) as info:
            self.load(config, env, directory)
        return info.value.lines

    def script(self, name: str, body: str, mode: int = 0o700) -> Path:
        """An executable Python script (absolute path) running under the test interpreter."""
        path = self.root / name
        path.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
        os.chmod(path, mode)
        return path

    def secret_file(self, name: str, text: str | bytes, mode: int = 0o600) -> Path:
        path = self.root / name
        if isinstance(text, str):
            text = text.encode("utf-8")
        path.write_bytes(text)
        os.chmod(path, mode)
        return path


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)
