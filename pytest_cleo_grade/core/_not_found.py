"""Whether a failed call was a "not found": the rules every adapter and recorder share.

CLEO's error protocol grades what an agent does after E_NOT_FOUND (exit code 4), so a miss
recorded as exit 1 hides it. Pure (no I/O): the audit recorders, the capture mapping and the
readers of CLEO's databases all ask here.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "E_NOT_FOUND",
    "NOT_FOUND_CODES",
    "NOT_FOUND_TYPES",
    "exception_code",
    "exception_exit_code",
    "int_code",
    "names_not_found",
    "says_not_found",
]

E_NOT_FOUND: Final = 4
#: Numeric codes that say "not found": HTTP 404, MCP's resource-not-found (-32002) and
#: JSON-RPC's method-not-found (-32601).
NOT_FOUND_CODES: Final = frozenset({404, -32002, -32601})
#: Exception class names that mean "not found" when only the name is known (spans).
NOT_FOUND_TYPES: Final = frozenset({"LookupError", "KeyError", "IndexError", "FileNotFoundError"})
_NOT_FOUND_TEXT: Final = re.compile(
    r"not[\s_-]?found|e_not_found|no such|does not exist|doesn't exist|unknown (task|id)"
    # A not-found exception named in the text, as frameworks that catch one write it:
    # LangGraph's handle_tool_errors sends "Error: KeyError('T9')" to the model.
    r"|\b(?:Key|Index|Lookup)Error\b",
    re.IGNORECASE,
)
#: An argument validation error (pydantic's "1 validation error for tasks_addArguments ...
#: [type=missing, input_value={...}]", the MCP SDK's "Input validation error: ..."): it quotes
#: the agent's own arguments, whose words ("Fix the 404 page not found") say nothing of the call.
_VALIDATION_TEXT: Final = re.compile(
    r"\bvalidation errors?\b|\[type=\w+,\s*input_value="
    # pydantic's errors() as JSON (or a dict's repr): pydantic-ai's retry prompt for arguments
    # that fail validation, its execute_tool span's result, is [{"type":"missing","loc":[...
    # (an error type that is itself a not-found, as a REST API's 404 body may use, is not one)
    r"""|["']type["']\s*:\s*["'](?!\w*not_?found)\w+["']\s*,\s*["']loc["']\s*:\s*[\[(]"""
    # LangGraph's ToolNode on such arguments (its ToolInvocationError, also as the repr that
    # handle_tool_errors=True writes): "Error invoking tool 'x' with kwargs {...} with error:\n
    # taskId: Field required". Not its "Error executing tool": that one wraps the tool's error.
    r"|\bError invoking tool \\?'[^'\n]*' with kwargs\b",
    re.IGNORECASE,
)


#: A call to a tool the agent does not have (Claude Code's "No such tool available: x", the
#: MCP SDK's "Unknown tool: x", LangChain's "x is not a valid tool", "Tool 'x' not found"):
#: a failed call, not a missing task or file, so no not-found (the MCP adapter's exit 1).
_NO_SUCH_TOOL: Final = re.compile(
    r"\bno such tool\b|\bunknown tool\b|\bis not a valid tool\b"
    r"|\btool (?:named )?['\"`]?[\w.:/-]+['\"`]? (?:was )?not found\b",
    re.IGNORECASE,
)


def says_not_found(text: str | None) -> bool:
    """Whether an error text says "not found" (E_NOT_FOUND, no such ..., does not exist).

    The text of an argument validation error is never read: it quotes the agent's arguments,
    and a title that says "not found" does not make a missing field a miss. Nor is a call to
    a tool that does not exist a not-found.
    """
    if not text or _VALIDATION_TEXT.search(text) is not None:
        return False
    return _NOT_FOUND_TEXT.search(text) is not None and _NO_SUCH_TOOL.search(text) is None


def int_code(value: Any) -> int | None:
    """``value`` when it is an int (a bool is not), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def exception_code(exc: BaseException) -> int | None:
    """The exit code an exception says by itself (its ``exit_code``, its class, an HTTP or
    JSON-RPC not-found it carries), or None when only its message could tell."""
    code = int_code(getattr(exc, "exit_code", None))
    if code:
        return code
    if isinstance(exc, LookupError | FileNotFoundError):
        return E_NOT_FOUND
    # The class-name rule spans get from error.type: the same exception must map alike
    # whether an adapter holds it or only its span's name reached the grader.
    if any(names_not_found(klass.__name__) for klass in type(exc).__mro__):
        return E_NOT_FOUND
    statuses = [getattr(exc, "status_code", None), getattr(exc, "status", None)]
    response = getattr(exc, "response", None)
    if response is not None:
        statuses.append(getattr(response, "status_code", None))
    if any(int_code(status) == 404 for status in statuses):
        return E_NOT_FOUND
    # A JSON-RPC error carried by the exception (the MCP SDK's McpError holds ``error``).
    error = getattr(exc, "error", None)
    if error is not None and int_code(getattr(error, "code", None)) in NOT_FOUND_CODES:
        return E_NOT_FOUND
    return None


def names_not_found(type_name: str) -> bool:
    """Whether an exception class name (``builtins.KeyError``, ``TaskNotFound``) is a miss."""
    short = type_name.rsplit(".", 1)[-1]
    return short in NOT_FOUND_TYPES or short.endswith(("NotFound", "NotFoundError"))


def exception_exit_code(exc: BaseException) -> int:
    """The exit code of a call that raised ``exc`` (never 0): its own code or a not-found
    rule above gives 4 (or the code), a message that says not found 4, anything else 1."""
    code = exception_code(exc)
    if code is not None:
        return code
    return E_NOT_FOUND if says_not_found(str(exc)) else 1
