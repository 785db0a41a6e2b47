"""The `hookgate` command line as a user runs it: a subprocess in ``cwd``, without the ``HOOKGATE_*``
variables of the test run's own environment (``env`` adds variables)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its ``HOOKGATE_*`` variables, plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKGATE_")}
    full_env.update(env or {})
    return full_env


def hookgate(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = cli_env(env)
    return subprocess.run([sys.executable, "-m", "hookgate.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=60, check=False)
