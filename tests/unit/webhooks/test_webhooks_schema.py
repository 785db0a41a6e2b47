"""Strict action schema (webhooks.md §3.1, §4, §5): exact messages and the order of checks."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookgate.errors import RequestError
from hookgate.webhooks.schema import (
    ACTION_NAMES,
    MUTATING_ACTIONS,
    UNSET,
    CancelFlow,
    CreateFlow,
    FailFlow,
    FindLatestFlow,
    FinishFlow,
    GetFlow,
    GetTask,
    GetTaskSummary,
    ListFlows,
    ListTasks,
    RequestCancel,
    ResolveFlow,
    ResumeFlow,
    RunTask,
    SchemaError,
    SetWaiting,
    UpdateTask,
    json_type_name,
    parse_action,
)

DISCRIMINATOR = (
    "action: Invalid discriminator value. Expected 'create_flow' | 'get_flow' | 'list_flows' | "
    "'find_latest_flow' | 'resolve_flow' | 'get_task_summary' | 'set_waiting' | 'resume_flow' | "
    "'finish_flow' | 'fail_flow' | 'request_cancel' | 'cancel_flow' | 'run_task' | 'get_task' | "
    "'list_tasks' | 'update_task'"
)


def error_of(body: Any) -> str:
    with pytest.raises(SchemaError) as info:
        parse_action(body)
    return info.value.message


def run_task(**extra: Any) -> dict[str, Any]:
    return {"action": "run_task", "flowId": "f1", "runtime": "subagent", "task": "do it", **extra}


# --- constants ---------------------------------------------------------------------------------


def test_action_names_and_mutating_set() -> None:
    assert len(ACTION_NAMES) == 16
    assert MUTATING_ACTIONS == {
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
    assert MUTATING_ACTIONS <= set(ACTION_NAMES)


def test_schema_error_is_a_400_invalid_request() -> None:
    error = SchemaError("x")
    assert isinstance(error, RequestError)
    assert (error.status, error.code, error.message) == (400, "invalid_request", "x")


# --- body and discriminator --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "word"),
    [(None, "null"), (True, "boolean"), (1, "number"), (1.5, "number"), ("x", "string"), ([], "array")],
)
def test_body_must_be_an_object(body: Any, word: str) -> None:
    assert error_of(body) == f"Invalid input: expected object, received {word}"


@pytest.mark.parametrize(
    "body",
    [{}, {"action": None}, {"action": 1}, {"action": "nope"}, {"action": "CREATE_FLOW"}, {"action": ["x"]}],
)
def test_discriminator_message(body: Any) -> None:
    assert error_of(body) == DISCRIMINATOR


def test_discriminator_is_checked_before_unknown_keys() -> None:
    assert error_of({"zzz": 1}) == DISCRIMINATOR


def test_json_type_names() -> None:
    values: list[Any] = [UNSET, None, False, 0, 0.5, "", [], {}]
    assert [json_type_name(v) for v in values] == [
        "undefined",
        "null",
        "boolean",
        "number",
        "number",
        "string",
        "array",
        "object",
    ]


# --- Id ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "word"),
    [(UNSET, "undefined"), (None, "null"), (True, "boolean"), (3, "number"), ([], "array"), ({}, "object")],
)
def test_id_type_errors(value: Any, word: str) -> None:
    body: dict[str, Any] = {"action": "get_flow"}
    if value is not UNSET:
        body["flowId"] = value
    assert error_of(body) == f"flowId: Invalid input: expected string, received {word}"


@pytest.mark.parametrize("blank", ["", "   ", "\t\n", "\u00a0\ufeff\u3000"])
def test_blank_id(blank: str) -> None:
    assert error_of({"action": "get_flow", "flowId": blank}) == (
        "flowId: Too small: expected string to have >=1 characters"
    )


def test_id_is_trimmed_with_javascript_whitespace() -> None:
    assert parse_action({"action": "get_flow", "flowId": "  f1\n"}) == GetFlow(flow_id="f1")
    assert parse_action({"action": "get_flow", "flowId": "\ufefff1\u2028"}) == GetFlow(flow_id="f1")
    # U+001F is whitespace for Python but not for JavaScript's trim.
    assert parse_action({"action": "get_flow", "flowId": "\x1ff1"}) == GetFlow(flow_id="\x1ff1")


def test_optional_id_rejects_null() -> None:
    assert error_of(run_task(sourceId=None)) == "sourceId: Invalid input: expected string, received null"
    assert error_of(run_task(label="  ")) == "label: Too small: expected string to have >=1 characters"


# --- Rev / Ms ----------------------------------------------------------------------------------


def set_waiting(**extra: Any) -> dict[str, Any]:
    return {"action": "set_waiting", "flowId": "f1", **extra}


@pytest.mark.parametrize(
    ("value", "word"),
    [
        (UNSET, "undefined"),
        (None, "null"),
        (True, "boolean"),
        ("1", "string"),
        ([1], "array"),
        ({}, "object"),
    ],
)
def test_rev_type_errors(value: Any, word: str) -> None:
    body = set_waiting() if value is UNSET else set_waiting(expectedRevision=value)
    assert error_of(body) == f"expectedRevision: Invalid input: expected number, received {word}"


@pytest.mark.parametrize("value", [1.5, -0.5, 1e-9, float("nan"), float("inf")])
def test_rev_not_an_integer(value: float) -> None:
    assert error_of(set_waiting(expectedRevision=value)) == (
        "expectedRevision: Invalid input: expected int, received number"
    )


@pytest.mark.parametrize("value", [-1, -1.0, -9007199254740992, -1e300])
def test_rev_negative(value: Any) -> None:
    assert (
        error_of(set_waiting(expectedRevision=value))
        == "expectedRevision: Too small: expected number to be >=0"
    )


@pytest.mark.parametrize("value", [9007199254740992, 2**63 - 1, 1e300])
def test_rev_too_big(value: Any) -> None:
    assert error_of(set_waiting(expectedRevision=value)) == (
        "expectedRevision: Too big: expected number to be <=9007199254740991"
    )


@pytest.mark.parametrize(
    ("value", "parsed"), [(0, 0), (9007199254740991, 9007199254740991), (2.0, 2), (-0.0, 0)]
)
def test_rev_bounds_and_integral_floats(value: Any, parsed: int) -> None:
    action = parse_action(set_waiting(expectedRevision=value))
    assert isinstance(action, SetWaiting)
    assert action.expected_revision == parsed
    assert type(action.expected_revision) is int


def test_integral_float_from_msgspec_decoding() -> None:
    body = msgspec.json.decode(b'{"action":"request_cancel","flowId":"f","expectedRevision":3.0}')
    assert parse_action(body) == RequestCancel(flow_id="f", expected_revision=3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1", "startedAt: Invalid input: expected number, received string"),
        (None, "startedAt: Invalid input: expected number, received null"),
        (False, "startedAt: Invalid input: expected number, received boolean"),
        (1.25, "startedAt: Invalid input: expected int, received number"),
        (-5, "startedAt: Too small: expected number to be >=0"),
        (10**16, "startedAt: Too big: expected number to be <=9007199254740991"),
    ],
)
def test_ms_errors(value: Any, message: str) -> None:
    assert error_of(run_task(status="running", startedAt=value)) == message


# --- Bool, NStr, Json, enums -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "word"), [(None, "null"), (0, "number"), ("true", "string"), ([], "array"), ({}, "object")]
)
def test_bool_errors(value: Any, word: str) -> None:
    assert error_of(run_task(preferMetadata=value)) == (
        f"preferMetadata: Invalid input: expected boolean, received {word}"
    )


def test_nstr_absent_null_and_string() -> None:
    absent = parse_action(set_waiting(expectedRevision=0))
    null = parse_action(set_waiting(expectedRevision=0, currentStep=None))
    given_ = parse_action(set_waiting(expectedRevision=0, currentStep=" s "))
    assert isinstance(absent, SetWaiting) and absent.current_step is UNSET
    assert isinstance(null, SetWaiting) and null.current_step is None
    assert isinstance(given_, SetWaiting) and given_.current_step == "s"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1, "currentStep: Invalid input: expected string, received number"),
        (False, "currentStep: Invalid input: expected string, received boolean"),
        ({}, "currentStep: Invalid input: expected string, received object"),
        (" ", "currentStep: Too small: expected string to have >=1 characters"),
    ],
)
def test_nstr_errors(value: Any, message: str) -> None:
    assert error_of(set_waiting(expectedRevision=0, currentStep=value)) == message


@pytest.mark.parametrize("value", [None, 0, "", [], {"a": [1, None]}, True, 1.5])
def test_json_accepts_anything(value: Any) -> None:
    action = parse_action(set_waiting(expectedRevision=0, stateJson=value, waitJson=value))
    assert isinstance(action, SetWaiting)
    assert action.state_json == value and action.wait_json == value
    assert action.blocked_task_id is UNSET


@pytest.mark.parametrize("value", ["cli", "cron", "SUBAGENT", None, 1, UNSET])
def test_enum_runtime(value: Any) -> None:
    body = run_task()
    if value is UNSET:
        del body["runtime"]
    else:
        body["runtime"] = value
    assert error_of(body) == 'runtime: Invalid option: expected one of "subagent"|"acp"'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"action": "create_flow", "goal": "g", "status": "succeeded"},
            'status: Invalid option: expected one of "queued"|"running"|"waiting"|"blocked"',
        ),
        (
            {"action": "create_flow", "goal": "g", "notifyPolicy": None},
            'notifyPolicy: Invalid option: expected one of "done_only"|"state_changes"|"silent"',
        ),
        (
            {"action": "resume_flow", "flowId": "f", "expectedRevision": 0, "status": "waiting"},
            'status: Invalid option: expected one of "queued"|"running"',
        ),
        (run_task(status="succeeded"), 'status: Invalid option: expected one of "queued"|"running"'),
        (
            {"action": "update_task", "taskId": "t", "status": "queued"},
            'status: Invalid option: expected one of "running"|"succeeded"|"failed"|"timed_out"|"cancelled"',
        ),
    ],
)
def test_enum_messages(body: dict[str, Any], message: str) -> None:
    assert error_of(body) == message


# --- unknown keys ------------------------------------------------------------------------------


def test_unknown_key_singular() -> None:
    assert error_of({"action": "list_flows", "flowId": "x"}) == 'Unrecognized key: "flowId"'


def test_unknown_keys_plural_in_body_order() -> None:
    assert error_of({"zeta": 1, "action": "list_flows", "alpha": 2}) == 'Unrecognized keys: "zeta", "alpha"'


def test_expected_revision_unknown_on_cancel_flow() -> None:
    body = {"action": "cancel_flow", "flowId": "f", "expectedRevision": 0}
    assert error_of(body) == 'Unrecognized key: "expectedRevision"'


@pytest.mark.parametrize(
    "key",
    ["dispatch", "sessionKey", "relay", "FlowId", "notifyPolicy"],
)
def test_unknown_keys_on_set_waiting(key: str) -> None:
    assert error_of(set_waiting(expectedRevision=0, **{key: 1})) == f'Unrecognized key: "{key}"'


# --- order of checks ---------------------------------------------------------------------------


def test_fields_checked_in_table_order() -> None:
    # flowId comes before expectedRevision, which comes before currentStep.
    assert error_of({"action": "set_waiting", "currentStep": 1, "extra": 1}).startswith("flowId:")
    assert error_of(set_waiting(currentStep=1, extra=1)).startswith("expectedRevision:")
    assert error_of(set_waiting(expectedRevision=0, blockedSummary=1, currentStep=2)).startswith(
        "currentStep:"
    )
    # run_task: task is after label in the table.
    body = run_task(label=5)
    del body["task"]
    assert error_of(body).startswith("label:")


def test_field_errors_before_unknown_keys() -> None:
    assert error_of({"action": "get_flow", "bogus": 1}) == (
        "flowId: Invalid input: expected string, received undefined"
    )


def test_unknown_keys_before_refinements() -> None:
    assert error_of(run_task(progressSummary="x", bogus=1)) == 'Unrecognized key: "bogus"'
    body = {"action": "update_task", "taskId": "t", "error": "boom", "bogus": 1}
    assert error_of(body) == 'Unrecognized key: "bogus"'


# --- refinements -------------------------------------------------------------------------------

RUN_REFINEMENT = "status: status must be running when startedAt, lastEventAt, or progressSummary is provided"


@pytest.mark.parametrize(
    "extra",
    [
        {"startedAt": 1},
        {"lastEventAt": 1},
        {"progressSummary": "p"},
        {"progressSummary": None},
        {"status": "queued", "startedAt": 1},
    ],
)
def test_run_task_status_refinement(extra: dict[str, Any]) -> None:
    assert error_of(run_task(**extra)) == RUN_REFINEMENT


def test_run_task_running_with_timestamps() -> None:
    action = parse_action(run_task(status="running", startedAt=5, lastEventAt=6, progressSummary=None))
    assert isinstance(action, RunTask)
    assert (action.started_at, action.last_event_at, action.progress_summary) == (5, 6, None)


TERMINAL_SUMMARY_REFINEMENT = (
    "terminalSummary: terminalSummary requires status succeeded, failed, timed_out or cancelled"
)
ERROR_REFINEMENT = "error: error requires status failed, timed_out or cancelled"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"terminalSummary": "s"}, TERMINAL_SUMMARY_REFINEMENT),
        ({"terminalSummary": "s", "status": "running"}, TERMINAL_SUMMARY_REFINEMENT),
        ({"error": "e"}, ERROR_REFINEMENT),
        ({"error": "e", "status": "running"}, ERROR_REFINEMENT),
        ({"error": "e", "status": "succeeded"}, ERROR_REFINEMENT),
        ({"error": "e", "terminalSummary": "s"}, TERMINAL_SUMMARY_REFINEMENT),
    ],
)
def test_update_task_refinements(extra: dict[str, Any], message: str) -> None:
    assert error_of({"action": "update_task", "taskId": "t", **extra}) == message


@pytest.mark.parametrize(
    "extra",
    [
        {"terminalSummary": None},
        {"error": None, "status": "running"},
        {"terminalSummary": "s", "status": "succeeded"},
        {"terminalSummary": "s", "error": "e", "status": "failed"},
        {"error": "e", "status": "timed_out"},
        {"error": "e", "status": "cancelled"},
    ],
)
def test_update_task_refinements_pass(extra: dict[str, Any]) -> None:
    assert isinstance(parse_action({"action": "update_task", "taskId": "t", **extra}), UpdateTask)


# --- successful parses -------------------------------------------------------------------------


def test_every_action_parses() -> None:
    cases: list[tuple[dict[str, Any], object]] = [
        ({"action": "create_flow", "goal": " g "}, CreateFlow(goal="g")),
        ({"action": "get_flow", "flowId": "f"}, GetFlow(flow_id="f")),
        ({"action": "list_flows"}, ListFlows()),
        ({"action": "find_latest_flow"}, FindLatestFlow()),
        ({"action": "resolve_flow", "token": "t"}, ResolveFlow(token="t")),
        ({"action": "get_task_summary", "flowId": "f"}, GetTaskSummary(flow_id="f")),
        ({"action": "set_waiting", "flowId": "f", "expectedRevision": 1}, SetWaiting("f", 1)),
        ({"action": "resume_flow", "flowId": "f", "expectedRevision": 1}, ResumeFlow("f", 1, "queued")),
        ({"action": "finish_flow", "flowId": "f", "expectedRevision": 1}, FinishFlow("f", 1)),
        ({"action": "fail_flow", "flowId": "f", "expectedRevision": 1}, FailFlow("f", 1)),
        ({"action": "request_cancel", "flowId": "f", "expectedRevision": 1}, RequestCancel("f", 1)),
        ({"action": "cancel_flow", "flowId": "f"}, CancelFlow("f")),
        (run_task(), RunTask(flow_id="f1", runtime="subagent", task="do it")),
        ({"action": "get_task", "taskId": "t"}, GetTask("t")),
        ({"action": "list_tasks", "flowId": "f"}, ListTasks("f")),
        ({"action": "update_task", "taskId": "t"}, UpdateTask("t")),
    ]
    assert [body["action"] for body, _ in cases] == list(ACTION_NAMES)
    for body, expected in cases:
        action = parse_action(body)
        assert action == expected
        assert type(action).action == body["action"]


def test_create_flow_full() -> None:
    action = parse_action(
        {
            "action": "create_flow",
            "goal": "Nightly",
            "controllerId": "ci/x",
            "status": "blocked",
            "notifyPolicy": "silent",
            "currentStep": None,
            "stateJson": {"a": 1},
            "waitJson": None,
        }
    )
    assert action == CreateFlow(
        goal="Nightly",
        controller_id="ci/x",
        status="blocked",
        notify_policy="silent",
        current_step=None,
        state_json={"a": 1},
        wait_json=None,
    )


def test_run_task_full() -> None:
    action = parse_action(
        run_task(
            sourceId="s",
            childSessionKey="agent:ops:sub:1",
            parentTaskId="p",
            agentId="ops",
            runId="r",
            label="l",
            preferMetadata=True,
            notifyPolicy="state_changes",
            status="running",
            startedAt=1,
            lastEventAt=2,
            progressSummary="going",
        )
    )
    assert action == RunTask(
        flow_id="f1",
        runtime="subagent",
        task="do it",
        source_id="s",
        child_session_key="agent:ops:sub:1",
        parent_task_id="p",
        agent_id="ops",
        run_id="r",
        label="l",
        prefer_metadata=True,
        notify_policy="state_changes",
        status="running",
        started_at=1,
        last_event_at=2,
        progress_summary="going",
    )


def test_actions_are_frozen() -> None:
    action = parse_action({"action": "get_flow", "flowId": "f"})
    assert isinstance(action, GetFlow)
    with pytest.raises(AttributeError):  # immutable: a parsed action is never changed after validation
        action.flow_id = "g"  # type: ignore[misc]
    assert action.flow_id == "f"


# --- property: only SchemaError, whatever JSON comes in ------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)

field_names = st.sampled_from(
    [
        "flowId",
        "taskId",
        "goal",
        "token",
        "expectedRevision",
        "currentStep",
        "stateJson",
        "waitJson",
        "blockedTaskId",
        "blockedSummary",
        "status",
        "runtime",
        "task",
        "label",
        "runId",
        "startedAt",
        "lastEventAt",
        "progressSummary",
        "terminalSummary",
        "error",
        "preferMetadata",
        "notifyPolicy",
        "controllerId",
        "bogus",
    ]
)

bodies = st.builds(
    lambda name, fields: {"action": name, **fields},
    st.sampled_from(ACTION_NAMES),
    st.dictionaries(field_names, json_values, max_size=6),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(json_values, bodies))
def test_validator_only_raises_schema_error(body: Any) -> None:
    try:
        action = parse_action(body)
    except SchemaError as error:
        assert error.message
        assert error.message == error.args[0]
    else:
        assert type(action).action == body["action"]


@settings(max_examples=200, deadline=None)
@given(bodies)
def test_round_trip_through_msgspec_json(body: dict[str, Any]) -> None:
    """Parsing the decoded JSON text gives the same result as parsing the Python value."""

    def outcome(value: Any) -> object:
        try:
            return parse_action(value)
        except SchemaError as error:
            return error.message

    decoded = msgspec.json.decode(msgspec.json.encode(body))
    assert outcome(decoded) == outcome(body)
