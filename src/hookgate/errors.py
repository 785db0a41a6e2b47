"""One exception tree for every failure kind hookgate answers or reports.

    HookgateError                 status, code, message — mapped to a response in edge/ only
     ├── RequestError             4xx answered by a surface (400, 404, 405, 409, …)
     ├── StoreUnavailable         503 + Retry-After: 1 — nothing was committed
     └── ConfigError              invalid configuration; carries every error line (exit status 2)
"""

from __future__ import annotations

from typing import Any


class HookgateError(Exception):
    """Base of every hookgate failure: an HTTP status, a stable code and a message."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class RequestError(HookgateError):
    """A request rejected with a 4xx status and the spec's exact error text."""

    status = 400
    code = "invalid_request"


class StoreUnavailable(HookgateError):
    """The store could not be reached or failed a commit; the client may retry."""

    status = 503
    code = "store_unavailable"


class ConfigError(HookgateError):
    """The configuration is invalid. ``lines`` holds every error found, each naming its key path."""

    code = "config_invalid"

    def __init__(
        self,
        lines: list[str],
        secret_inputs: tuple[Any, ...] = (),
        warnings: tuple[str, ...] = (),
        hooks: Any = None,
        config_dir: str | None = None,
    ) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        # every secret input resolved before the errors were found (``SecretSource``s), so that
        # ``secrets check`` can still print its OK/ERROR line per key for a config that fails on them
        self.secret_inputs = secret_inputs
        # the warnings found alongside the errors: ``config check`` reports both together
        self.warnings = warnings
        # the hooks settings when they could be built (``HooksSettings``) and the config directory:
        # ``config check`` still imports their transform modules, so an import error is reported too
        self.hooks = hooks
        self.config_dir = config_dir
