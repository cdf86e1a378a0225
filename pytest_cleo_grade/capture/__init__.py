"""Capture adapters: tool calls of agent frameworks become audit entries with no glue.

:mod:`~pytest_cleo_grade.capture.mapping` is the one mapping every adapter shares (standard
library only). The adapters import their framework and live in submodules installed with an
extra: ``capture.otel`` and ``capture.otlp`` (``otel``), ``capture.mcp`` (``mcp``),
``capture.pydantic_ai`` (``pydantic-ai``). Importing this package imports none of them.

The names a test or an agent writes come from here: ``record``, ``audited`` and
``AuditedDispatcher`` (:mod:`~pytest_cleo_grade.capture.audit`), and the mapping's.
"""

from __future__ import annotations

from pytest_cleo_grade.capture.audit import (
    AuditedDispatcher,
    UnknownOperationError,
    audited,
    record,
)
from pytest_cleo_grade.capture.mapping import (
    CLEO_DOMAINS,
    CLEO_TOOLS,
    ENV_TOOL_MAP,
    Call,
    Failure,
    MappingError,
    Route,
    Target,
    ToolMapping,
    build_entry,
    configure,
    current_mapping,
    envelope_failure,
    exit_code_for,
    map_tool_call,
    record_call,
    says_not_found,
    subprocess_env,
)

__all__ = [
    "CLEO_DOMAINS",
    "CLEO_TOOLS",
    "ENV_TOOL_MAP",
    "AuditedDispatcher",
    "Call",
    "Failure",
    "MappingError",
    "Route",
    "Target",
    "ToolMapping",
    "UnknownOperationError",
    "audited",
    "build_entry",
    "configure",
    "current_mapping",
    "envelope_failure",
    "exit_code_for",
    "map_tool_call",
    "record",
    "record_call",
    "says_not_found",
    "subprocess_env",
]
