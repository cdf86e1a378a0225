"""Builders of CLEO-shaped audit entries for the tests (one second apart unless told)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_cleo_grade.core.models import AuditEntry

BASE_TIME = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 1, 13, 0, 0, tzinfo=UTC)


def entry(
    domain: str,
    operation: str,
    *,
    at: int = 0,
    params: dict[str, Any] | None = None,
    success: bool = True,
    exit_code: int = 0,
    gateway: str | None = "cleo_query",
    session: str | None = "s1",
    task_id: str | None = None,
    source: str = "mcp",
) -> dict[str, Any]:
    """A CLEO-shaped dict, ``at`` seconds after BASE_TIME."""
    stamp = (BASE_TIME + timedelta(seconds=at)).isoformat().replace("+00:00", "Z")
    return {
        "timestamp": stamp,
        "sessionId": session,
        "domain": domain,
        "operation": operation,
        "params": params or {},
        "result": {"success": success, "exitCode": exit_code, "duration": 3},
        "metadata": {"source": source, "gateway": gateway, "taskId": task_id, "userId": None},
        "error": None if success else "E_NOT_FOUND",
    }


def sequence(*calls: tuple[str, str] | dict[str, Any]) -> list[dict[str, Any]]:
    """Entries one second apart, in the given order; tuples are (domain, operation)."""
    result = []
    for position, call in enumerate(calls):
        if isinstance(call, tuple):
            result.append(entry(call[0], call[1], at=position))
        else:
            item = dict(call)
            item["timestamp"] = (
                (BASE_TIME + timedelta(seconds=position)).isoformat().replace("+00:00", "Z")
            )
            result.append(item)
    return result


def model(data: dict[str, Any]) -> AuditEntry:
    return AuditEntry.model_validate(data)
