"""The one mapping from a framework's tool call to a CLEO audit entry, and its exit codes.

Every capture adapter (OpenTelemetry, OTLP, MCP, pydantic-ai, ...) describes a call by the
tool's name, its arguments and how it ended, and this module decides the rest: which
``domain.operation`` it is, through which gateway, and which exit code a failure gets. Pure
standard library plus the package's models: no framework is imported here.

Name rules, first match wins:

1. an explicit :class:`ToolMapping` route for the tool's name;
2. CLEO's own MCP shape: a tool ``cleo_query``/``cleo_mutate`` (or ``query``/``mutate``)
   whose arguments are ``{domain, operation, params}``;
3. a dotted name, ``tasks.find``;
4. a CLEO domain followed by ``_``: ``tasks_find``, ``session_list``, ``tools_skill_show``
   (the remaining underscores become dots, the separator of CLEO's operations);
5. anything else: domain ``tool``, operation the tool's name.

A name Claude gives an MCP tool, ``mcp__<server>__<tool>`` (``mcp__cleo__cleo_query``), is
mapped by its ``<tool>`` part when no route names it whole.

Gateway: the CLEO tool's own name (rule 2), else the route's gateway, else an MCP tool's
``readOnlyHint`` (true: ``cleo_query``, false: ``cleo_mutate``), else the mapping's
``default_gateway`` (None unless configured: the call counts as neither a query nor a mutation).
A mapping's gateways are CLEO's own spellings (:data:`audit.GATEWAYS`); any other is a
MappingError, because a typo would silently stop the calls counting as query-gateway calls.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from pydantic import ValidationError

from pytest_cleo_grade.capture import _faults as faults
from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.capture._task_ids import task_id_from_result
from pytest_cleo_grade.core._files import MAX_NESTING
from pytest_cleo_grade.core._not_found import (
    E_NOT_FOUND,
    NOT_FOUND_CODES,
    NOT_FOUND_TYPES,
    exception_code,
    int_code,
    names_not_found,
    says_not_found,
)
from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    EntryError,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.models import AuditEntry, format_validation_error

__all__ = [
    "CLEO_DOMAINS",
    "CLEO_TOOLS",
    "ENV_TOOL_MAP",
    "E_NOT_FOUND",
    "NOT_FOUND_CODES",
    "NOT_FOUND_TYPES",
    "Call",
    "ExitCodeRule",
    "Failure",
    "MappingError",
    "Route",
    "Rule",
    "StartedIn",
    "Target",
    "ToolMapping",
    "build_entry",
    "configure",
    "current_mapping",
    "elapsed_ms",
    "envelope_failure",
    "exit_code_for",
    "map_tool_call",
    "parse_arguments",
    "raised_failure",
    "record_call",
    "record_call_started_in",
    "says_not_found",
    "session_at_start",
    "subprocess_env",
    "texts_envelope_failure",
]

#: CLEO's canonical domains (plus ``skills``, which its progressive-disclosure rule names).
CLEO_DOMAINS: Final = frozenset(
    {
        "tasks",
        "session",
        "memory",
        "check",
        "pipeline",
        "orchestrate",
        "tools",
        "admin",
        "nexus",
        "sticky",
        "skills",
    }
)
#: CLEO's MCP gateway tools: each is its own gateway (CLEO renamed cleo_query to query).
CLEO_TOOLS: Final = frozenset({"cleo_query", "cleo_mutate", "query", "mutate"})
#: The variable a child process reads the user's mapping from (JSON, see ToolMapping.to_json).
ENV_TOOL_MAP: Final = "CLEO_GRADE_TOOL_MAP"

_GATEWAY_OF_HINT: Final = {True: "cleo_query", False: "cleo_mutate"}

Rule = Literal["mapping", "cleo", "dotted", "prefix", "fallback"]


class MappingError(CleoGradeError):
    """A tool mapping (ini line, dict, environment variable) is malformed."""


@dataclass(frozen=True)
class Route:
    """Where the user says a tool goes: ``domain.operation`` and optionally a gateway."""

    domain: str
    operation: str
    gateway: str | None = None

    def __post_init__(self) -> None:
        _gateway(self.gateway, f"route to {self.domain}.{self.operation}")


@dataclass(frozen=True)
class Target:
    """What a tool call becomes: domain, operation, gateway, params, and the rule that chose."""

    domain: str
    operation: str
    gateway: str | None
    params: dict[str, Any]
    rule: Rule


@dataclass(frozen=True)
class Failure:
    """How a tool call failed, as much as the adapter knows.

    ``exception``: what the tool raised; ``payload``: an error result (MCP content, CLEO's
    envelope, a JSON-RPC error object or its JSON text); ``message``: the error text;
    ``code``: a numeric or CLEO code (JSON-RPC code, HTTP status, ``E_NOT_FOUND``);
    ``error_type``: the exception's class name when only its name is known (a span's
    ``exception.type`` or ``error.type``).
    """

    tool: str
    exception: BaseException | None = None
    payload: Any = None
    message: str | None = None
    code: int | str | None = None
    error_type: str | None = None

    def text(self) -> str:
        """The failure's error text for the entry's ``error`` field."""
        if self.message:
            return self.message
        if self.exception is not None:
            return str(self.exception) or type(self.exception).__name__
        if isinstance(self.payload, str) and self.payload:
            return self.payload
        if self.payload is not None:
            return _compact(self.payload)
        return "failed" if self.code is None else f"failed ({self.code})"


#: A user rule deciding a failure's exit code; None falls back to the built-in rules.
ExitCodeRule = Callable[[Failure], int | None]


@dataclass(frozen=True)
class Call:
    """One tool call as an adapter saw it, ready to become an entry."""

    tool: str
    arguments: Any = None
    failure: Failure | None = None
    #: An MCP tool's ``readOnlyHint`` (None: not known).
    read_only: bool | None = None
    started: datetime | None = None
    duration_ms: float | None = None
    source: str = "mcp"
    #: Extra metadata kept on the entry (e.g. the span or trace id).
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: What the call's source could not see (its arguments, its error's text), said in a
    #: warning when the call is recorded: its entry is graded on part of the call.
    unseen: str | None = None
    #: The tool's answer, when the adapter sees it: the id of the task a ``tasks.add``
    #: created is read from it (capture/_task_ids.py) when the arguments name none.
    result: Any = None


@dataclass(frozen=True)
class ToolMapping:
    """The user's explicit mapping: routes by tool name, a default gateway, an exit-code rule."""

    routes: Mapping[str, Route] = field(default_factory=dict)
    default_gateway: str | None = None
    exit_code: ExitCodeRule | None = None

    def __post_init__(self) -> None:
        _gateway(self.default_gateway, "the default gateway")

    @classmethod
    def parse(
        cls, lines: Iterable[str], *, where: str = "tool mapping", item: str = "line"
    ) -> ToolMapping:
        """Routes from ini lines ``TOOL = DOMAIN.OPERATION [GATEWAY]``.

        ``* = GATEWAY`` sets the default gateway. Blank lines and ``#`` comments are skipped
        (but counted); a malformed line raises MappingError naming ``where`` and the line as
        ``{item} {number}`` (the plugin says ``entry``: pytest hands over an ini value's lines
        without their blank lines and comments, so a line number would be wrong).
        """
        routes: dict[str, Route] = {}
        default: str | None = None
        for number, raw in enumerate(lines, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, rest = line.partition("=")
            name, words = name.strip(), rest.split()
            place = f"{where}, {item} {number}"
            if not sep or not name or not words:
                raise MappingError(f"{place}: expected 'TOOL = DOMAIN.OPERATION [GATEWAY]'")
            if name == "*":
                if len(words) != 1:
                    raise MappingError(f"{place}: expected '* = GATEWAY'")
                default = _gateway(words[0], place)
                continue
            if len(words) > 2:
                raise MappingError(f"{place}: expected 'TOOL = DOMAIN.OPERATION [GATEWAY]'")
            routes[name] = _route(words[0], words[1] if len(words) == 2 else None, place)
        return cls(routes=routes, default_gateway=default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "tool mapping") -> ToolMapping:
        """Routes from ``{"TOOL": "DOMAIN.OPERATION" | {"target": ..., "gateway": ...}}``.

        The key ``"*"`` holds the default gateway. This is also the JSON form of
        :meth:`to_json` (and of the ``CLEO_GRADE_TOOL_MAP`` variable).
        """
        if not isinstance(data, Mapping):
            raise MappingError(f"{where}: expected an object of tool names")
        routes: dict[str, Route] = {}
        default: str | None = None
        for name, value in data.items():
            place = f"{where}: {name!r}"
            if not isinstance(name, str) or not name:
                raise MappingError(f"{where}: tool names must be non-empty strings")
            if name == "*":
                if value is not None and not isinstance(value, str):
                    raise MappingError(f"{place}: the default gateway must be a string")
                default = _gateway(value, place)
            elif isinstance(value, str):
                routes[name] = _route(value, None, place)
            elif isinstance(value, Mapping) and isinstance(value.get("target"), str):
                gateway = value.get("gateway")
                if gateway is not None and not isinstance(gateway, str):
                    raise MappingError(f"{place}: gateway must be a string")
                routes[name] = _route(value["target"], gateway, place)
            else:
                raise MappingError(f"{place}: expected 'DOMAIN.OPERATION' or {{'target': ...}}")
        return cls(routes=routes, default_gateway=default)

    def to_json(self) -> str:
        """The routes and default gateway as JSON (the exit-code callable cannot travel)."""
        data: dict[str, Any] = {
            name: {"target": f"{r.domain}.{r.operation}", "gateway": r.gateway}
            for name, r in self.routes.items()
        }
        if self.default_gateway is not None:
            data["*"] = self.default_gateway
        return json.dumps(data, sort_keys=True)

    def target(self, tool: str, arguments: Any = None, *, read_only: bool | None = None) -> Target:
        """The domain, operation, gateway and params of a call (see the module's rules)."""
        route = self.routes.get(tool)
        if route is None and tool.startswith("mcp__"):
            # Claude's name for an MCP tool, mcp__<server>__<tool>: the tool's own name decides.
            _, sep, bare = tool[len("mcp__") :].partition("__")
            if sep and bare:
                return self.target(bare, arguments, read_only=read_only)
        params = parse_arguments(arguments)
        if route is not None:
            gateway = route.gateway or _hint_gateway(read_only) or self.default_gateway
            return Target(route.domain, route.operation, gateway, params, "mapping")
        cleo = _cleo_shape(tool, params)
        if cleo is not None:
            return cleo
        gateway = _hint_gateway(read_only) or self.default_gateway
        domain, dot, operation = tool.partition(".")
        if dot and domain and operation:
            return Target(domain, operation, gateway, params, "dotted")
        domain, underscore, rest = tool.partition("_")
        if underscore and domain in CLEO_DOMAINS and rest.strip("_"):
            operation = ".".join(part for part in rest.split("_") if part)
            return Target(domain, operation, gateway, params, "prefix")
        return Target("tool", tool or "unnamed", gateway, params, "fallback")

    def exit_code_for(self, failure: Failure) -> int:
        """The failure's exit code: the user's rule first, then :func:`exit_code_for`."""
        if self.exit_code is not None:
            code = self.exit_code(failure)
            if code is not None:
                if isinstance(code, bool) or not isinstance(code, int):
                    raise MappingError(
                        f"the exit_code rule returned {code!r} for tool {failure.tool!r};"
                        " expected an int or None"
                    )
                return code
        return exit_code_for(failure)


def _route(target: str, gateway: str | None, place: str) -> Route:
    domain, dot, operation = target.partition(".")
    if not dot or not domain or not operation:
        raise MappingError(f"{place}: {target!r} is not DOMAIN.OPERATION")
    return Route(domain, operation, _gateway(gateway, place))


def _gateway(word: str | None, place: str) -> str | None:
    """``word`` if it is one of CLEO's gateways, None if empty; else a MappingError naming
    ``place``, with the nearest gateway as a hint. Not lowercased: CLEO writes them lowercase,
    and ``Query`` in an entry would count as no gateway at all."""
    if not word:
        return None
    if word in audit.GATEWAYS:
        return word
    accepted = sorted(audit.GATEWAYS)
    close = difflib.get_close_matches(word.lower(), accepted, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise MappingError(f"{place}: gateway {word!r} is not one of {', '.join(accepted)}{hint}")


def _hint_gateway(read_only: bool | None) -> str | None:
    return None if read_only is None else _GATEWAY_OF_HINT[bool(read_only)]


def _cleo_shape(tool: str, params: dict[str, Any]) -> Target | None:
    if tool not in CLEO_TOOLS:
        return None
    domain, operation = params.get("domain"), params.get("operation")
    if not isinstance(domain, str) or not domain or not isinstance(operation, str):
        return None
    if not operation:
        return None
    # Claude often sends an object argument as its JSON text ("params": "{\"title\": ...}"),
    # and CLEO accepts it: parsed like the call's own arguments, a non-object kept under input.
    return Target(domain, operation, tool, parse_arguments(params.get("params")), "cleo")


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """A call's arguments as params: a mapping as is, JSON object text parsed, None empty;
    anything else under ``input``. Values are made JSON-safe (the store writes JSON)."""
    value = arguments
    if isinstance(value, str | bytes):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        try:
            value = json.loads(text) if text.strip() else None
        except (ValueError, RecursionError):  # not JSON, or nested beyond the parser
            value = text
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return {"input": _json_safe(value)}


def _json_safe(value: Any) -> Any:
    """Plain JSON values as they are; anything else (models, dates, sets) as JSON text would
    show it. Non-finite floats become text: JSON cannot hold them, the entry would be invalid.

    Arguments come from the agent: a container holding itself becomes its text at the point
    it comes round again, and one nested deeper than MAX_NESTING is left for the entry's
    validation to refuse (a warning, and the test fails), never a RecursionError in the agent.
    """
    return _safe(value, 0, set())


def _safe(value: Any, depth: int, enclosing: set[int]) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping | list | tuple):
        if depth >= MAX_NESTING:
            return value
        if id(value) in enclosing:
            return _text(value)
        enclosing.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {str(k): _safe(v, depth + 1, enclosing) for k, v in value.items()}
            return [_safe(v, depth + 1, enclosing) for v in value]
        finally:
            enclosing.discard(id(value))
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return _safe(dump(mode="json"), depth, enclosing)
        except Exception:
            return _text(value)
    return _text(value)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # a broken __str__, or a repr too deep to print
        return f"<{type(value).__name__}>"


def _compact(value: Any) -> str:
    try:
        return json.dumps(_json_safe(value), sort_keys=True)[:500]
    except (TypeError, ValueError):
        return str(value)[:500]


# -- exit codes ---------------------------------------------------------------------------


def _envelope_code(payload: Any, depth: int = 0) -> int | None:
    """An exit code read from CLEO's error envelope or a JSON-RPC error object, if any."""
    if depth > 3:
        return None
    if isinstance(payload, str | bytes):
        parsed = parse_arguments(payload)
        if set(parsed) == {"input"}:
            return None
        payload = parsed
    if isinstance(payload, list | tuple):
        for item in payload:
            code = _envelope_code(_content_text(item) or item, depth + 1)
            if code is not None:
                return code
        return None
    if not isinstance(payload, Mapping):
        return None
    for key in ("exitCode", "exit_code"):
        code = int_code(payload.get(key))
        if code:
            return code
    code_value = payload.get("code")
    if isinstance(code_value, str) and code_value.upper() == "E_NOT_FOUND":
        return E_NOT_FOUND
    numeric = int_code(code_value)
    if numeric in NOT_FOUND_CODES:
        return E_NOT_FOUND
    for key in ("status", "status_code", "statusCode"):
        if int_code(payload.get(key)) == 404:
            return E_NOT_FOUND
    for key in ("error", "content", "structuredContent", "structured_content"):
        if key in payload:
            code = _envelope_code(payload[key], depth + 1)
            if code is not None:
                return code
    return None


def _content_text(item: Any) -> str | None:
    """The text of an MCP content block, given as a dict or an object with ``text``."""
    text = item.get("text") if isinstance(item, Mapping) else getattr(item, "text", None)
    return text if isinstance(text, str) else None


def exit_code_for(failure: Failure | BaseException) -> int:
    """The exit code of a failed call (never 0).

    An ``exit_code`` attribute or ``exitCode`` field wins; then "not found" is CLEO's
    E_NOT_FOUND (4): LookupError (KeyError, IndexError), FileNotFoundError (or a class name
    in :data:`NOT_FOUND_TYPES` or ending in ``NotFound``/``NotFoundError``), HTTP 404, a
    JSON-RPC code in :data:`NOT_FOUND_CODES`, CLEO's ``{"code": "E_NOT_FOUND"}``, or an
    error text that says not found; anything else is 1.
    """
    if isinstance(failure, BaseException):
        failure = Failure(tool="", exception=failure)
    if failure.exception is not None:
        code = exception_code(failure.exception)
        if code is not None:
            return code
    code = _envelope_code(failure.payload)
    if code is not None:
        return code
    if failure.error_type is not None and names_not_found(failure.error_type):
        return E_NOT_FOUND
    if isinstance(failure.code, str) and failure.code.upper() == "E_NOT_FOUND":
        return E_NOT_FOUND
    if int_code(failure.code) in NOT_FOUND_CODES:
        return E_NOT_FOUND
    texts = [failure.message, _payload_text(failure.payload)]
    if failure.exception is not None:
        texts.append(str(failure.exception))
    if any(says_not_found(text) for text in texts):
        return E_NOT_FOUND
    return 1


def _payload_text(payload: Any) -> str | None:
    if payload is None:
        return None
    if isinstance(payload, str):
        return payload
    if isinstance(payload, list | tuple):
        return " ".join(t for t in (_content_text(item) for item in payload) if t)
    return _compact(payload)


def envelope_failure(tool: str, result: Any) -> Failure | None:
    """A Failure when a tool's normal result is CLEO's error envelope (``success: false``),
    given as a mapping or its JSON text; None for anything else."""
    value = result
    if isinstance(value, str | bytes):
        parsed = parse_arguments(value)
        value = None if set(parsed) == {"input"} else parsed
    if isinstance(value, Mapping) and value.get("success") is False:
        error = value.get("error")
        message = None
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
        return Failure(tool=tool, payload=dict(value), message=message)
    return None


def texts_envelope_failure(tool: str, texts: Iterable[Any]) -> Failure | None:
    """CLEO's error envelope in a tool's text output, read alike by every adapter: each text
    (a content block; a hook's error text) is tried whole, then line by line, because a
    client may join the blocks (the envelope, then a hint) into one text. None if none."""
    for text in texts:
        if not isinstance(text, str):
            continue
        found = envelope_failure(tool, text)
        if found is not None:
            return found
        if "\n" not in text:
            continue
        for line in text.splitlines():
            if line.lstrip().startswith("{"):
                found = envelope_failure(tool, line)
                if found is not None:
                    return found
    return None


# -- the process-wide mapping ---------------------------------------------------------------

_configured: ToolMapping | None = None
_from_env: dict[str, ToolMapping] = {}
_lock = threading.Lock()
_EMPTY: Final = ToolMapping()


def configure(mapping: ToolMapping | None) -> ToolMapping | None:
    """Set the mapping adapters use when none is passed to them; returns the previous one."""
    global _configured
    with _lock:
        previous, _configured = _configured, mapping
    return previous


def current_mapping() -> ToolMapping:
    """The configured mapping, else the one in ``CLEO_GRADE_TOOL_MAP`` (a child process),
    else the empty mapping (the built-in rules only)."""
    if _configured is not None:
        return _configured
    text = os.environ.get(ENV_TOOL_MAP)
    if not text:
        return _EMPTY
    found = _from_env.get(text)
    if found is None:
        try:
            found = ToolMapping.from_dict(json.loads(text), where=ENV_TOOL_MAP)
        except (ValueError, MappingError) as exc:
            raise MappingError(f"{ENV_TOOL_MAP}: {exc}") from exc
        _from_env[text] = found
    return found


def map_tool_call(
    tool: str,
    arguments: Any = None,
    *,
    read_only: bool | None = None,
    mapping: ToolMapping | None = None,
) -> Target:
    """Where a call of ``tool`` with ``arguments`` goes (``mapping`` defaults to the
    process-wide one, see :func:`current_mapping`)."""
    return (mapping or current_mapping()).target(tool, arguments, read_only=read_only)


def build_entry(
    call: Call,
    *,
    session_id: str | None,
    mapping: ToolMapping | None = None,
) -> AuditEntry:
    """The audit entry of ``call``. Raises EntryError (naming the tool) when it is invalid."""
    chosen = mapping or current_mapping()
    target = chosen.target(call.tool, call.arguments, read_only=call.read_only)
    failure = call.failure
    task_id = target.params.get("taskId")
    if not isinstance(task_id, str) and failure is None:
        task_id = task_id_from_result(target.domain, target.operation, call.result)
    metadata: dict[str, Any] = {
        "source": call.source,
        "gateway": target.gateway,
        "task_id": task_id if isinstance(task_id, str) else None,
        "tool": call.tool,
    }
    metadata.update({k: _json_safe(v) for k, v in call.extra.items() if k not in metadata})
    try:
        return AuditEntry(
            timestamp=call.started or datetime.now(UTC),
            session_id=session_id,
            domain=target.domain,
            operation=target.operation,
            params=target.params,
            result={
                "success": failure is None,
                "exit_code": 0 if failure is None else chosen.exit_code_for(failure),
                "duration": max(0.0, call.duration_ms or 0.0),
            },
            metadata=metadata,
            error=None if failure is None else failure.text(),
        )
    except ValidationError as exc:
        where = f"tool call {call.tool!r}"
        raise EntryError(format_validation_error(exc, where)) from exc


def record_call(call: Call, *, mapping: ToolMapping | None = None) -> AuditEntry | None:
    """Record ``call`` into the graded session this process's environment names.

    None when no session is active (the code under test runs unchanged outside graded
    tests). A call that cannot become a valid entry, or a mapping that is malformed, is a
    CleoGradeWarning, never an exception in the code under test.
    """
    if audit.active_session() is None:
        return None
    try:
        entry = build_entry(call, session_id=None, mapping=mapping)
    except CleoGradeError as exc:
        audit.refuse(str(exc))
        with warnings_shown_not_raised():
            warnings.warn(f"cleo-grade: {exc}", CleoGradeWarning, stacklevel=2)
        return None
    _warn_unseen(call)
    return audit.record_entry(entry)


def _warn_unseen(call: Call) -> None:
    """A call graded on part of what it was must say so (a not-found read as a plain failure
    hides the error protocol); the tool's name is repr'd: it may come from the agent."""
    if call.unseen is not None:
        with warnings_shown_not_raised():
            warnings.warn(
                f"cleo-grade: {call.source}: tool {call.tool!r}: {call.unseen}",
                CleoGradeWarning,
                stacklevel=3,
            )


def raised_failure(tool: str, exc: BaseException) -> Failure:
    """The failure of a call that raised. A cancellation (the caller's timeout, a
    ``move_on_after``, a sibling call's error cancelling the others) is no Exception, but the
    call was made and may have acted: it is a failure saying it was cancelled."""
    if isinstance(exc, Exception):
        return Failure(tool=tool, exception=exc)
    return Failure(tool=tool, message=f"cancelled before it ended ({type(exc).__name__})")


#: The graded session a call started in: what :func:`pytest_cleo_grade.capture.audit.active_session`
#: said when the adapter saw the call start (None: no session was active).
StartedIn = tuple[str, Path, bool] | None


def session_at_start() -> StartedIn:
    """The session a call starting now belongs to (a cached look-up: no I/O)."""
    return audit.active_session()


def record_call_started_in(
    call: Call, started_in: StartedIn, *, mapping: ToolMapping | None = None
) -> AuditEntry | None:
    """Record ``call`` into the session it started in (:func:`session_at_start` then), not
    the one active when it ends.

    A call a test left running (in a thread, a task) that ends during the next test is the
    first test's: recorded into the next one it would change a grade for a call that test
    never made. Such a call is delivered to its own session as a child process's would be:
    held if that session is still open in this process, else stored under it, in no grade
    (docs/pytest.md). A call that started outside any session is nobody's and is dropped.
    """
    if started_in == audit.active_session():
        return record_call(call, mapping=mapping)  # the usual case: it ends where it began
    if started_in is None:
        return None
    session_id, path, grade_mode = started_in
    try:
        entry = build_entry(call, session_id=session_id, mapping=mapping)
    except CleoGradeError as exc:
        # Not audit.refuse(): that tells the active session, which this call is not part of.
        with warnings_shown_not_raised():
            warnings.warn(f"cleo-grade: {exc}", CleoGradeWarning, stacklevel=2)
        return None
    if not grade_mode and entry.metadata.gateway not in audit.MUTATE_GATEWAYS:
        return None  # outside grade mode only mutations are audited, as record_entry() does
    _warn_unseen(call)
    return audit._deliver(entry, session_id, path)


def injected_fault(
    tool: str, arguments: Any = None, *, mapping: ToolMapping | None = None
) -> faults.Fault | None:
    """The fault ``graded_session.inject()`` queued for this call, used up; None if none.

    An adapter asks before running the tool; with a fault it fails the call its framework's
    way and records it with :func:`record_injected`.
    """
    active = audit.active_session()
    session_id = active[0] if active else None
    if not faults.any_pending(session_id):
        return None
    try:
        target = map_tool_call(tool, arguments, mapping=mapping)
    except CleoGradeError:
        return None
    return faults.take(session_id, target.domain, target.operation)


def record_injected(
    fault: faults.Fault,
    tool: str,
    arguments: Any = None,
    *,
    read_only: bool | None = None,
    source: str = "mcp",
    mapping: ToolMapping | None = None,
) -> AuditEntry | None:
    """Record an injected failure like a real one, marked ``metadata.injected``."""
    failure = Failure(tool=tool, exception=faults.InjectedFault(fault))
    call = Call(
        tool=tool,
        arguments=arguments,
        failure=failure,
        read_only=read_only,
        duration_ms=0.0,
        source=source,
        extra={faults.INJECTED_KEY: True},
    )
    return record_call(call, mapping=mapping)


def elapsed_ms(started_ns: int) -> float:
    """Milliseconds since ``time.perf_counter_ns()`` returned ``started_ns``."""
    return (time.perf_counter_ns() - started_ns) / 1_000_000


class HasEnv(Protocol):
    """A graded session: anything with CLEO's grade-mode variables as ``env``."""

    @property
    def env(self) -> Mapping[str, str]: ...


def subprocess_env(
    session: HasEnv | Mapping[str, str],
    *,
    mapping: ToolMapping | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables a child process needs to record into ``session``.

    CLEO's four grade-mode variables, the tool mapping as ``CLEO_GRADE_TOOL_MAP`` (``mapping``,
    else the configured one, if any), and ``extra`` (e.g. an OTLP receiver's ``env()``).
    Only these: the MCP SDK's stdio client merges ``env=`` over its safe defaults; for
    ``subprocess`` merge them over ``os.environ``.
    """
    base = session if isinstance(session, Mapping) else session.env
    env = {str(k): str(v) for k, v in base.items()}
    chosen = mapping if mapping is not None else _configured
    if chosen is not None and (chosen.routes or chosen.default_gateway is not None):
        env[ENV_TOOL_MAP] = chosen.to_json()
    elif ENV_TOOL_MAP in os.environ:
        env[ENV_TOOL_MAP] = os.environ[ENV_TOOL_MAP]
    env.update(extra or {})
    return env
