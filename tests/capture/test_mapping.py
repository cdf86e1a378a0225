"""The one mapping from a tool call to an audit entry, its exit codes, and record_call()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.capture import mapping
from pytest_cleo_grade.capture.mapping import (
    ENV_TOOL_MAP,
    Call,
    Failure,
    MappingError,
    Route,
    ToolMapping,
    build_entry,
    envelope_failure,
    exit_code_for,
    map_tool_call,
    parse_arguments,
    record_call,
    subprocess_env,
)
from pytest_cleo_grade.core.errors import CleoGradeWarning, EntryError
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, assert_same_grade, grade_by_hand, run_tool


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


@pytest.fixture(autouse=True)
def no_configured_mapping() -> Iterator[None]:
    previous = mapping.configure(None)
    yield
    mapping.configure(previous)


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        pytest.param(
            "cleo_query",
            {"domain": "tasks", "operation": "find", "params": {"query": "x"}},
            ("tasks", "find", "cleo_query", {"query": "x"}, "cleo"),
            id="cleo-query-shape",
        ),
        pytest.param(
            "mutate",
            {"domain": "tasks", "operation": "add", "params": {"title": "t"}},
            ("tasks", "add", "mutate", {"title": "t"}, "cleo"),
            id="renamed-mutate-gateway",
        ),
        pytest.param(
            "cleo_mutate",
            {
                "domain": "tasks",
                "operation": "add",
                "params": '{"title": "Fix login", "description": "Users cannot log in"}',
            },
            (
                "tasks",
                "add",
                "cleo_mutate",
                {"title": "Fix login", "description": "Users cannot log in"},
                "cleo",
            ),
            id="cleo-params-sent-as-json-text-are-parsed",
        ),
        pytest.param(
            "cleo_query",
            {"domain": "tasks", "operation": "find", "params": "login"},
            ("tasks", "find", "cleo_query", {"input": "login"}, "cleo"),
            id="cleo-params-not-an-object-kept-under-input",
        ),
        pytest.param(
            "cleo_query",
            {"q": 1},
            ("tool", "cleo_query", None, {"q": 1}, "fallback"),
            id="cleo-tool-without-domain-is-a-plain-tool",
        ),
        pytest.param(
            "tasks.find",
            {"query": "x"},
            ("tasks", "find", None, {"query": "x"}, "dotted"),
            id="dotted",
        ),
        pytest.param(
            "skill.show.full",
            None,
            ("skill", "show.full", None, {}, "dotted"),
            id="dotted-keeps-the-rest",
        ),
        pytest.param("tasks_find", {}, ("tasks", "find", None, {}, "prefix"), id="prefix"),
        pytest.param(
            "tools_skill_show",
            {},
            ("tools", "skill.show", None, {}, "prefix"),
            id="prefix-underscores-become-dots",
        ),
        pytest.param(
            "weather_lookup",
            {},
            ("tool", "weather_lookup", None, {}, "fallback"),
            id="unknown-domain",
        ),
        pytest.param(
            "search",
            '{"q": "x"}',
            ("tool", "search", None, {"q": "x"}, "fallback"),
            id="json-arguments-parsed",
        ),
        pytest.param(
            "echo",
            "hello",
            ("tool", "echo", None, {"input": "hello"}, "fallback"),
            id="non-object-arguments-kept-under-input",
        ),
    ],
)
def test_tool_names_map_by_the_documented_rules(
    tool: str, arguments: Any, expected: tuple[Any, ...]
) -> None:
    target = map_tool_call(tool, arguments)
    assert (target.domain, target.operation, target.gateway, target.params, target.rule) == expected


def test_an_explicit_route_beats_every_built_in_rule() -> None:
    routes = ToolMapping.parse(["tasks_find = tasks.list cleo_query", "lookup = tasks.show"])
    target = map_tool_call("tasks_find", {}, mapping=routes)
    assert (target.domain, target.operation, target.gateway, target.rule) == (
        "tasks",
        "list",
        "cleo_query",
        "mapping",
    )
    assert map_tool_call("lookup", mapping=routes).operation == "show"


@pytest.mark.parametrize(
    ("read_only", "route_gateway", "default", "expected"),
    [
        (True, None, None, "cleo_query"),
        (False, None, None, "cleo_mutate"),
        (None, None, None, None),
        (None, None, "query", "query"),
        (True, "cleo_mutate", None, "cleo_mutate"),
    ],
)
def test_gateway_comes_from_the_route_then_read_only_hint_then_default(
    read_only: bool | None, route_gateway: str | None, default: str | None, expected: str | None
) -> None:
    routes = {"lookup": Route("tasks", "show", route_gateway)}
    chosen = ToolMapping(routes=routes, default_gateway=default)
    assert map_tool_call("lookup", read_only=read_only, mapping=chosen).gateway == expected


def test_cleo_tool_name_is_the_gateway_whatever_the_hint() -> None:
    args = {"domain": "tasks", "operation": "find"}
    assert map_tool_call("cleo_query", args, read_only=False).gateway == "cleo_query"


class WithCode(Exception):
    exit_code = 7


class Http404(Exception):
    status_code = 404


class TaskNotFoundError(Exception):
    """A not-found by its class name only (its text does not say so)."""


class MissingTask(TaskNotFoundError):
    pass


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error = type("ErrorData", (), {"code": code, "message": message})()


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        pytest.param(KeyError("T9"), 4, id="KeyError"),
        pytest.param(LookupError("x"), 4, id="LookupError"),
        pytest.param(FileNotFoundError("x"), 4, id="FileNotFoundError"),
        pytest.param(WithCode("boom"), 7, id="exit_code-attribute"),
        pytest.param(Http404("gone"), 4, id="HTTP-404-exception"),
        pytest.param(TaskNotFoundError("T9"), 4, id="class-named-NotFoundError"),
        pytest.param(MissingTask("T9"), 4, id="subclass-of-a-NotFoundError"),
        pytest.param(Failure("t", error_type="app.TaskNotFound"), 4, id="span-error-type"),
        pytest.param(RpcError(-32002, "gone"), 4, id="json-rpc-resource-not-found"),
        pytest.param(RpcError(-32603, "internal"), 1, id="json-rpc-internal-error"),
        pytest.param(ValueError("bad value"), 1, id="other-exception"),
        pytest.param(RuntimeError("Task T9 not found"), 4, id="text-says-not-found"),
        pytest.param(
            Failure("t", payload={"code": "E_NOT_FOUND", "exitCode": 4}), 4, id="cleo-envelope"
        ),
        pytest.param(
            Failure("t", payload={"success": False, "error": {"code": "E_X", "exitCode": 6}}),
            6,
            id="nested-envelope-exit-code",
        ),
        pytest.param(
            Failure("t", payload='{"error": {"code": "E_NOT_FOUND"}}'), 4, id="envelope-as-json"
        ),
        pytest.param(
            Failure("t", payload=[{"type": "text", "text": "Error: no such task T9"}]),
            4,
            id="mcp-content-text",
        ),
        pytest.param(Failure("t", payload=[{"type": "text", "text": "denied"}]), 1, id="mcp-1"),
        pytest.param(Failure("t", code=404), 4, id="http-404-code"),
        pytest.param(Failure("t", code=500, message="server error"), 1, id="http-500"),
        pytest.param(Failure("t", message="Unknown task T9"), 4, id="unknown-task-text"),
        # A validation error quotes the agent's arguments: their words decide nothing.
        pytest.param(
            Failure(
                "t",
                message="Error executing tool tasks_add: 1 validation error for "
                "tasks_addArguments\ndescription\n  Field required [type=missing, input_value="
                "{'title': 'Fix the 404 pa...not found', 'desc': 'd'}, input_type=dict]",
            ),
            1,
            id="pydantic-validation-error-quoting-the-arguments",
        ),
        pytest.param(
            Failure(
                "t",
                payload=[
                    {
                        "type": "text",
                        "text": "Input validation error: 'Page not found' is not of type 'integer'",
                    }
                ],
            ),
            1,
            id="mcp-input-validation-error",
        ),
        pytest.param(
            Failure("t", payload='[{"type": "missing", "loc": ["taskId"], "msg": "not found"}]'),
            1,
            id="pydantic-errors-as-json",
        ),
        # Shaped like pydantic's errors, yet its type says what failed: a not-found.
        pytest.param(
            Failure(
                "t",
                payload='{"detail": [{"type": "not_found", "loc": ["taskId"], '
                '"msg": "Task T9 not found"}]}',
            ),
            4,
            id="an-api-not-found-body-in-pydantics-shape",
        ),
    ],
)
def test_failures_get_cleos_exit_codes(failure: Failure | BaseException, expected: int) -> None:
    assert exit_code_for(failure) == expected


def test_a_user_rule_overrides_exit_codes_and_none_falls_back() -> None:
    chosen = ToolMapping(exit_code=lambda f: 9 if f.tool == "special" else None)
    assert chosen.exit_code_for(Failure("special", exception=KeyError("x"))) == 9
    assert chosen.exit_code_for(Failure("other", exception=KeyError("x"))) == 4


def test_a_user_rule_returning_a_non_int_is_a_clear_error() -> None:
    chosen = ToolMapping(exit_code=lambda f: "4")  # type: ignore[arg-type,return-value]
    with pytest.raises(MappingError, match="exit_code rule returned '4' for tool 'x'"):
        chosen.exit_code_for(Failure("x"))


def test_envelope_failure_finds_cleos_success_false_results() -> None:
    found = envelope_failure("t", '{"success": false, "error": {"message": "T9 missing"}}')
    assert found is not None and found.text() == "T9 missing"
    assert envelope_failure("t", {"success": True}) is None
    assert envelope_failure("t", "plain text") is None


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["tasks_find"], "tool mapping, line 1: expected 'TOOL = DOMAIN.OPERATION"),
        (["", "x = tasksfind"], "tool mapping, line 2: 'tasksfind' is not DOMAIN.OPERATION"),
        (["x = a.b c d"], "tool mapping, line 1: expected"),
        (["* = a b"], "line 1: expected '\\* = GATEWAY'"),
        (
            ["lookup = tasks.show cleo_qeury"],
            "tool mapping, line 1: gateway 'cleo_qeury' is not one of cleo_mutate, cleo_query,"
            " mutate, query; did you mean 'cleo_query'\\?",
        ),
        (["# any", "* = Query"], "tool mapping, line 2: gateway 'Query' .* did you mean 'query'"),
        (["x = a.b write"], "line 1: gateway 'write' is not one of [a-z_, ]+$"),
    ],
)
def test_malformed_mapping_lines_name_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(MappingError, match=message):
        ToolMapping.parse(lines)


def test_a_mapping_line_is_named_as_the_caller_counts_it() -> None:
    # The plugin's ini lines come without blanks and comments: it counts entries, not lines.
    with pytest.raises(MappingError, match=r"^pytest\.ini: key, entry 2: 'tasksadd' is not"):
        ToolMapping.parse(["a = tasks.find", "b = tasksadd"], where="pytest.ini: key", item="entry")


@pytest.mark.parametrize("gateway", ["cleo_query", "query", "cleo_mutate", "mutate"])
def test_cleo_gateways_are_accepted_as_written(gateway: str) -> None:
    chosen = ToolMapping.parse([f"lookup = tasks.show {gateway}", f"* = {gateway}"])
    assert (chosen.routes["lookup"].gateway, chosen.default_gateway) == (gateway, gateway)
    assert map_tool_call("lookup", mapping=chosen).gateway == gateway


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"lookup": {"target": "tasks.show", "gateway": "Query"}}, "'lookup': gateway 'Query'"),
        ({"*": "cleo_qeury"}, r"'\*': gateway 'cleo_qeury' .* did you mean 'cleo_query'"),
    ],
)
def test_a_dict_mappings_gateway_is_one_of_cleos(data: dict[str, Any], message: str) -> None:
    with pytest.raises(MappingError, match=message):
        ToolMapping.from_dict(data)


def test_a_mapping_built_in_python_refuses_a_gateway_cleo_does_not_write() -> None:
    with pytest.raises(MappingError, match=r"route to tasks\.show: gateway 'Query'"):
        Route("tasks", "show", "Query")
    with pytest.raises(MappingError, match="the default gateway: gateway 'cleo_qeury'"):
        ToolMapping(default_gateway="cleo_qeury")


def test_a_bad_gateway_in_the_childs_variable_is_a_warning_not_a_silent_entry(
    session: GradeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_TOOL_MAP, json.dumps({"*": "Query"}))
    with pytest.warns(CleoGradeWarning, match=f"{ENV_TOOL_MAP}: .*gateway 'Query'"):
        assert record_call(Call("lookup")) is None
    assert session.entries == []


def test_mapping_round_trips_through_json_for_child_processes() -> None:
    chosen = ToolMapping.parse(["# comment", "lookup = tasks.show cleo_query", "* = query"])
    again = ToolMapping.from_dict(json.loads(chosen.to_json()))
    assert again.routes == chosen.routes
    assert again.default_gateway == "query"


def test_malformed_dict_mapping_names_the_tool() -> None:
    with pytest.raises(MappingError, match=r"'lookup': expected 'DOMAIN\.OPERATION'"):
        ToolMapping.from_dict({"lookup": 3})


@pytest.mark.e2e
def test_a_child_reads_the_mapping_from_its_environment(tmp_path: Path) -> None:
    code = (
        "from pytest_cleo_grade.capture.mapping import map_tool_call;"
        "t = map_tool_call('lookup'); print(t.domain, t.operation, t.gateway)"
    )
    env = {ENV_TOOL_MAP: ToolMapping.parse(["lookup = tasks.show cleo_query"]).to_json()}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["tasks", "show", "cleo_query"]


def test_configure_sets_the_process_mapping_and_returns_the_previous_one() -> None:
    first = ToolMapping.parse(["lookup = tasks.show"])
    assert mapping.configure(first) is None
    assert map_tool_call("lookup").domain == "tasks"
    assert mapping.configure(None) is first
    assert map_tool_call("lookup").domain == "tool"


def test_record_call_without_a_session_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    assert record_call(Call("tasks_find")) is None


def test_record_call_keeps_the_calls_own_time_duration_and_tool(session: GradeSession) -> None:
    started = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
    entry = record_call(
        Call("tasks_show", {"taskId": "T1"}, started=started, duration_ms=12.5, source="otel")
    )
    assert entry is not None
    assert session.entries == [entry]
    assert entry.timestamp == started
    assert entry.session_id == session.id
    assert entry.result.duration == 12.5
    assert entry.metadata.task_id == "T1"
    assert entry.metadata.source == "otel"
    assert entry.model_dump()["metadata"]["tool"] == "tasks_show"


def test_an_invalid_call_is_a_warning_not_an_error_in_the_code_under_test(
    session: GradeSession,
) -> None:
    naive = datetime(2026, 3, 1, 12, 0)  # an adapter bug: a time without a timezone
    with pytest.warns(CleoGradeWarning, match="tool call 'x': timestamp"):
        assert record_call(Call("x", started=naive)) is None
    assert session.entries == []


def test_build_entry_names_the_tool_when_invalid() -> None:
    with pytest.raises(EntryError, match="tool call 'x'"):
        build_entry(Call("x", started=datetime(2026, 3, 1)), session_id="s")


def test_non_json_argument_values_are_stored_as_text(session: GradeSession) -> None:
    entry = record_call(Call("tasks_add", {"when": {1, 2}, "ratio": float("nan")}))
    assert entry is not None
    assert entry.params == {"when": "{1, 2}", "ratio": "nan"}
    session.flush()
    assert session.store.session_entries(session.id)[0].params == entry.params


def test_arguments_that_hold_themselves_are_recorded_with_their_text(
    session: GradeSession,
) -> None:
    looped: list[Any] = []
    looped.append(looped)
    own: dict[str, Any] = {}
    own["self"] = own
    entry = record_call(Call("tasks_add", {"x": looped, "d": own}))
    assert entry is not None
    assert entry.params == {"x": ["[[...]]"], "d": {"self": "{'self': {...}}"}}
    assert session.refused == []


def test_arguments_nested_past_the_limit_are_refused_never_raised_into_the_agent(
    session: GradeSession,
) -> None:
    deep: list[Any] = []
    for _ in range(2000):  # beyond Python's own recursion limit
        deep = [deep]
    with pytest.warns(CleoGradeWarning, match="tool call 'tasks_add': params: .*nested too deeply"):
        assert record_call(Call("tasks_add", {"x": deep})) is None
    assert len(session.refused) == 1 and "nested too deeply" in session.refused[0]
    # JSON text nested beyond the parser is kept as the text it is.
    text = "[" * 100_000 + "]" * 100_000
    assert parse_arguments(text) == {"input": text}


def test_recorded_calls_grade_like_the_same_calls_recorded_by_hand(
    session: GradeSession,
) -> None:
    for name, arguments in CALLS:
        try:
            run_tool(name, arguments)
        except KeyError as exc:
            record_call(Call(name, arguments, failure=Failure(name, exception=exc)))
        else:
            record_call(Call(name, arguments))
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_subprocess_env_carries_the_session_and_the_mapping(session: GradeSession) -> None:
    routes = ToolMapping.parse(["lookup = tasks.show"])
    env = subprocess_env(session, mapping=routes, extra={"OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert {k: env[k] for k in session.env} == session.env
    assert ToolMapping.from_dict(json.loads(env[ENV_TOOL_MAP])).routes == routes.routes
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "x"
    assert ENV_TOOL_MAP not in subprocess_env(session)


CORE_PROBE = """
import sys
import pytest_cleo_grade, pytest_cleo_grade.plugin, pytest_cleo_grade.capture
import pytest_cleo_grade.capture._spans
frameworks = ("mcp", "opentelemetry", "pydantic_ai")
print(sorted(m for m in sys.modules if m.split(".")[0] in frameworks))
"""


@pytest.mark.e2e
def test_the_core_and_the_mapping_import_no_framework() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CORE_PROBE], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("otel", "opentelemetry", "otel"),
        ("mcp", "mcp", "mcp"),
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra_to_install(
    module: str, framework: str, extra: str
) -> None:
    # Python marks a module as absent with None in sys.modules, as when it is not installed.
    probe = (
        f"import sys\nsys.modules[{framework!r}] = None\n"
        f"import pytest_cleo_grade.capture.{module}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    # One line, of an ImportError pytest.importorskip takes for a module not installed.
    assert last.startswith(
        "pytest_cleo_grade.core.errors.MissingExtraError: pytest_cleo_grade.capture."
    ), last
    assert f"pip install 'pytest-cleo-grade[{extra}]'" in last
