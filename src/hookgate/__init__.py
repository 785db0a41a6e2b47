"""hookgate: a self-hosted webhook ingress for AI assistants."""

from __future__ import annotations

__version__ = "1.0.0"
