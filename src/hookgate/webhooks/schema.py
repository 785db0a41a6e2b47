"""Strict action schemas of the TaskFlow action API (webhooks.md §3.1, §4, §5).

``parse_action(body)`` takes the already JSON-decoded body and returns one typed action object, or
raises ``SchemaError`` whose message is the spec's exact ``"<field>: <message>"`` text for the first
issue. Checks run in the spec's order: the body is an object; ``action``; each field in the order of
the action's table; unknown keys; refinements.

The messages follow zod's wording, so the JSON semantics follow zod too:

- a JSON number is one kind: ``1.0`` is the integer 1 (msgspec decodes it as a float, so integral
  floats are accepted as ints and returned as ``int``); ``true``/``false`` are never numbers;
- non-finite floats (not producible by a JSON decoder) are reported like a non-integer;
- ``Id`` trimming uses JavaScript's ``String.prototype.trim`` whitespace set, not ``str.strip()``.

Absent and JSON ``null`` differ for ``NStr`` and ``Json`` fields: absent is ``UNSET``, null is
``None``. Other optional fields cannot be null, so absent is ``None`` (or the spec's default).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, TypeAlias

import msgspec

from hookgate.errors import RequestError
from hookgate.jstext import js_trim


class Unset(enum.Enum):
    """The type of ``UNSET``: a key that was absent from the body."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET

NStr: TypeAlias = "str | None | Literal[Unset.UNSET]"
"""``Id`` (a trimmed non-empty string), JSON ``null``, or absent."""

Json: TypeAlias = Any
"""Any JSON value (``None`` = JSON ``null``), or ``UNSET`` when absent."""

MAX_SAFE_INTEGER: Final = 9_007_199_254_740_991


ACTION_NAMES: Final[tuple[str, ...]] = (
    "create_flow",
    "get_flow",
    "list_flows",
    "find_latest_flow",
    "resolve_flow",
    "get_task_summary",
    "set_waiting",
    "resume_flow",
    "finish_flow",
    "fail_flow",
    "request_cancel",
    "cancel_flow",
    "run_task",
    "get_task",
    "list_tasks",
    "update_task",
)
"""All 16 actions in the spec's order (13 compatible + 3 hookgate extensions)."""

MUTATING_ACTIONS: Final[frozenset[str]] = frozenset(
    {
        "create_flow",
        "set_waiting",
        "resume_flow",
        "finish_flow",
        "fail_flow",
        "request_cancel",
        "cancel_flow",
        "run_task",
        "update_task",
    }
)
"""Actions that take part in ``Idempotency-Key`` handling (webhooks.md §3.5)."""

FLOW_CREATE_STATUSES: Final = ("queued", "running", "waiting", "blocked")
RESUME_STATUSES: Final = ("queued", "running")
NOTIFY_POLICIES: Final = ("done_only", "state_changes", "silent")
RUN_TASK_RUNTIMES: Final = ("subagent", "acp")
RUN_TASK_STATUSES: Final = ("queued", "running")
UPDATE_TASK_STATUSES: Final = ("running", "succeeded", "failed", "timed_out", "cancelled")

DISCRIMINATOR_MESSAGE: Final = "action: Invalid discriminator value. Expected " + " | ".join(
    f"'{name}'" for name in ACTION_NAMES
)
RUN_TASK_STATUS_REFINEMENT: Final = (
    "status: status must be running when startedAt, lastEventAt, or progressSummary is provided"
)
TERMINAL_SUMMARY_REFINEMENT: Final = (
    "terminalSummary: terminalSummary requires status succeeded, failed, timed_out or cancelled"
)
ERROR_REFINEMENT: Final = "error: error requires status failed, timed_out or cancelled"


class SchemaError(RequestError):
    """The body failed the strict action schema: 400 ``invalid_request`` with the exact text."""

    status = 400
    code = "invalid_request"


# --------------------------------------------------------------------------------------------------
# Action objects


class CreateFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "create_flow"
    goal: str
    controller_id: str | None = None  # None → the route's controllerId
    status: str = "queued"
    notify_policy: str = "done_only"
    current_step: NStr = UNSET  # null and absent both mean "no step"
    state_json: Json = UNSET
    wait_json: Json = UNSET


class GetFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "get_flow"
    flow_id: str


class ListFlows(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "list_flows"


class FindLatestFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "find_latest_flow"


class ResolveFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "resolve_flow"
    token: str


class GetTaskSummary(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "get_task_summary"
    flow_id: str


class SetWaiting(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "set_waiting"
    flow_id: str
    expected_revision: int
    current_step: NStr = UNSET
    state_json: Json = UNSET
    wait_json: Json = UNSET
    blocked_task_id: NStr = UNSET
    blocked_summary: NStr = UNSET


class ResumeFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "resume_flow"
    flow_id: str
    expected_revision: int
    status: str = "queued"
    current_step: NStr = UNSET
    state_json: Json = UNSET


class FinishFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "finish_flow"
    flow_id: str
    expected_revision: int
    state_json: Json = UNSET


class FailFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "fail_flow"
    flow_id: str
    expected_revision: int
    state_json: Json = UNSET
    blocked_task_id: NStr = UNSET
    blocked_summary: NStr = UNSET


class RequestCancel(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "request_cancel"
    flow_id: str
    expected_revision: int


class CancelFlow(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "cancel_flow"
    flow_id: str


class RunTask(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "run_task"
    flow_id: str
    runtime: str
    task: str
    source_id: str | None = None
    child_session_key: str | None = None
    parent_task_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    label: str | None = None
    prefer_metadata: bool = False
    notify_policy: str = "done_only"
    status: str = "queued"
    started_at: int | None = None
    last_event_at: int | None = None
    progress_summary: NStr = UNSET


class GetTask(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "get_task"
    task_id: str


class ListTasks(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "list_tasks"
    flow_id: str


class UpdateTask(msgspec.Struct, frozen=True):
    action: ClassVar[str] = "update_task"
    task_id: str
    status: str | None = None  # None → no status change
    progress_summary: NStr = UNSET
    terminal_summary: NStr = UNSET
    error: NStr = UNSET
    last_event_at: int | None = None  # None → now


FlowMutation: TypeAlias = SetWaiting | ResumeFlow | FinishFlow | FailFlow | RequestCancel
Action: TypeAlias = (
    CreateFlow
    | GetFlow
    | ListFlows
    | FindLatestFlow
    | ResolveFlow
    | GetTaskSummary
    | SetWaiting
    | ResumeFlow
    | FinishFlow
    | FailFlow
    | RequestCancel
    | CancelFlow
    | RunTask
    | GetTask
    | ListTasks
    | UpdateTask
)

# --------------------------------------------------------------------------------------------------
# Field tables (validation order = the spec's table order)

Kind = Literal["id", "opt_id", "rev", "ms", "opt_ms", "nstr", "json", "bool", "enum", "opt_enum"]


@dataclass(frozen=True, slots=True)
class _Field:
    key: str
    attr: str
    kind: Kind
    options: tuple[str, ...] = ()
    # absent from the body: skipped (optional), or set to UNSET (nstr, json)
    optional: bool = False
    keep_unset: bool = False


_OPTIONAL_KINDS = ("opt_id", "opt_ms", "nstr", "json", "opt_enum", "bool")


def _f(key: str, attr: str, kind: Kind, options: tuple[str, ...] = ()) -> _Field:
    return _Field(key, attr, kind, options, kind in _OPTIONAL_KINDS, kind in ("nstr", "json"))


_FLOW_ID = _f("flowId", "flow_id", "id")
_REV = _f("expectedRevision", "expected_revision", "rev")

_SCHEMAS: Final[dict[str, tuple[type[Any], tuple[_Field, ...]]]] = {
    "create_flow": (
        CreateFlow,
        (
            _f("goal", "goal", "id"),
            _f("controllerId", "controller_id", "opt_id"),
            _f("status", "status", "opt_enum", FLOW_CREATE_STATUSES),
            _f("notifyPolicy", "notify_policy", "opt_enum", NOTIFY_POLICIES),
            _f("currentStep", "current_step", "nstr"),
            _f("stateJson", "state_json", "json"),
            _f("waitJson", "wait_json", "json"),
        ),
    ),
    "get_flow": (GetFlow, (_FLOW_ID,)),
    "list_flows": (ListFlows, ()),
    "find_latest_flow": (FindLatestFlow, ()),
    "resolve_flow": (ResolveFlow, (_f("token", "token", "id"),)),
    "get_task_summary": (GetTaskSummary, (_FLOW_ID,)),
    "set_waiting": (
        SetWaiting,
        (
            _FLOW_ID,
            _REV,
            _f("currentStep", "current_step", "nstr"),
            _f("stateJson", "state_json", "json"),
            _f("waitJson", "wait_json", "json"),
            _f("blockedTaskId", "blocked_task_id", "nstr"),
            _f("blockedSummary", "blocked_summary", "nstr"),
        ),
    ),
    "resume_flow": (
        ResumeFlow,
        (
            _FLOW_ID,
            _REV,
            _f("status", "status", "opt_enum", RESUME_STATUSES),
            _f("currentStep", "current_step", "nstr"),
            _f("stateJson", "state_json", "json"),
        ),
    ),
    "finish_flow": (FinishFlow, (_FLOW_ID, _REV, _f("stateJson", "state_json", "json"))),
    "fail_flow": (
        FailFlow,
        (
            _FLOW_ID,
            _REV,
            _f("stateJson", "state_json", "json"),
            _f("blockedTaskId", "blocked_task_id", "nstr"),
            _f("blockedSummary", "blocked_summary", "nstr"),
        ),
    ),
    "request_cancel": (RequestCancel, (_FLOW_ID, _REV)),
    "cancel_flow": (CancelFlow, (_FLOW_ID,)),
    "run_task": (
        RunTask,
        (
            _FLOW_ID,
            _f("runtime", "runtime", "enum", RUN_TASK_RUNTIMES),
            _f("sourceId", "source_id", "opt_id"),
            _f("childSessionKey", "child_session_key", "opt_id"),
            _f("parentTaskId", "parent_task_id", "opt_id"),
            _f("agentId", "agent_id", "opt_id"),
            _f("runId", "run_id", "opt_id"),
            _f("label", "label", "opt_id"),
            _f("task", "task", "id"),
            _f("preferMetadata", "prefer_metadata", "bool"),
            _f("notifyPolicy", "notify_policy", "opt_enum", NOTIFY_POLICIES),
            _f("status", "status", "opt_enum", RUN_TASK_STATUSES),
            _f("startedAt", "started_at", "opt_ms"),
            _f("lastEventAt", "last_event_at", "opt_ms"),
            _f("progressSummary", "progress_summary", "nstr"),
        ),
    ),
    "get_task": (GetTask, (_f("taskId", "task_id", "id"),)),
    "list_tasks": (ListTasks, (_FLOW_ID,)),
    "update_task": (
        UpdateTask,
        (
            _f("taskId", "task_id", "id"),
            _f("status", "status", "opt_enum", UPDATE_TASK_STATUSES),
            _f("progressSummary", "progress_summary", "nstr"),
            _f("terminalSummary", "terminal_summary", "nstr"),
            _f("error", "error", "nstr"),
            _f("lastEventAt", "last_event_at", "opt_ms"),
        ),
    ),
}
_KNOWN_KEYS: Final[dict[str, frozenset[str]]] = {
    name: frozenset({"action", *(spec.key for spec in fields)}) for name, (_, fields) in _SCHEMAS.items()
}

# --------------------------------------------------------------------------------------------------
# Primitive checks


def json_type_name(value: Any) -> str:
    """The received-type word of zod messages for a decoded JSON value (``UNSET`` → ``undefined``)."""
    if value is UNSET:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object"


def _expected(key: str, type_word: str, value: Any) -> SchemaError:
    return SchemaError(f"{key}: Invalid input: expected {type_word}, received {json_type_name(value)}")


def _check_id(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _expected(key, "string", value)
    trimmed = js_trim(value)
    if not trimmed:
        raise SchemaError(f"{key}: Too small: expected string to have >=1 characters")
    return trimmed


def _check_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _expected(key, "number", value)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise SchemaError(f"{key}: Invalid input: expected int, received number")
        value = int(value)
    if value < 0:
        raise SchemaError(f"{key}: Too small: expected number to be >=0")
    if value > MAX_SAFE_INTEGER:
        raise SchemaError(f"{key}: Too big: expected number to be <={MAX_SAFE_INTEGER}")
    return int(value)


def _check_enum(key: str, value: Any, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in options:
        listed = "|".join(f'"{option}"' for option in options)
        raise SchemaError(f"{key}: Invalid option: expected one of {listed}")
    return value


def _check_field(spec: _Field, value: Any) -> Any:
    """The parsed value of one present field (or of a required one, absent: ``UNSET`` is refused)."""
    kind = spec.kind
    if kind in ("id", "opt_id"):
        return _check_id(spec.key, value)
    if kind in ("rev", "ms", "opt_ms"):
        return _check_int(spec.key, value)
    if kind == "nstr":
        return None if value is None else _check_id(spec.key, value)
    if kind == "json":
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _expected(spec.key, "boolean", value)
        return value
    return _check_enum(spec.key, value, spec.options)


def _unknown_keys(body: dict[str, Any], known: frozenset[str]) -> None:
    unknown = [key for key in body if key not in known]
    if len(unknown) == 1:
        raise SchemaError(f'Unrecognized key: "{unknown[0]}"')
    if unknown:
        raise SchemaError("Unrecognized keys: " + ", ".join(f'"{key}"' for key in unknown))


def _refine(name: str, values: dict[str, Any]) -> None:
    if name == "run_task":
        status = values.get("status", "queued")
        extras = ("started_at", "last_event_at", "progress_summary")
        if status != "running" and any(values.get(attr, UNSET) is not UNSET for attr in extras):
            raise SchemaError(RUN_TASK_STATUS_REFINEMENT)
    elif name == "update_task":
        status = values.get("status", UNSET)
        terminal_summary = values.get("terminal_summary", UNSET)
        error = values.get("error", UNSET)
        if isinstance(terminal_summary, str) and status not in (
            "succeeded",
            "failed",
            "timed_out",
            "cancelled",
        ):
            raise SchemaError(TERMINAL_SUMMARY_REFINEMENT)
        if isinstance(error, str) and status not in ("failed", "timed_out", "cancelled"):
            raise SchemaError(ERROR_REFINEMENT)


# --------------------------------------------------------------------------------------------------
# Entry point


def parse_action(body: Any) -> Action:
    """Validate a decoded request body strictly; the first issue raises ``SchemaError``."""
    if not isinstance(body, dict):
        raise SchemaError(f"Invalid input: expected object, received {json_type_name(body)}")
    name = body.get("action", UNSET)
    if not isinstance(name, str) or name not in _SCHEMAS:
        raise SchemaError(DISCRIMINATOR_MESSAGE)
    cls, fields = _SCHEMAS[name]
    values: dict[str, Any] = {}
    for spec in fields:
        value = body.get(spec.key, UNSET)
        if value is UNSET and spec.optional:  # most optional fields are absent: no call for them
            if spec.keep_unset:
                values[spec.attr] = UNSET
            continue
        values[spec.attr] = _check_field(spec, value)
    known = _KNOWN_KEYS[name]
    if not known.issuperset(body):
        _unknown_keys(body, known)
    _refine(name, values)
    action: Action = cls(**values)
    return action
