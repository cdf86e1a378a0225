"""A deterministic demo agent working an in-memory task tracker through CLEO-shaped calls.

No model and no network: each scenario of the ct-grade guide is scripted twice,
once following the CLEO protocol and once showing the anti-pattern the rubric penalises.
Every call goes through an audited transport, so the graded session sees exactly what the
agent did.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_cleo_grade.capture.audit import AuditedDispatcher, exit_code_for, record


def _next_millisecond() -> None:
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= start:
        pass


class TaskNotFound(LookupError):
    """A task id the tracker does not know (recorded as CLEO's E_NOT_FOUND, exit code 4)."""


@dataclass
class Task:
    id: str
    title: str
    description: str
    parent: str | None = None


@dataclass
class TaskTracker:
    """The system the agent works on: tasks, sessions and a help text."""

    tasks: dict[str, Task] = field(default_factory=dict)
    sessions: list[str] = field(default_factory=lambda: ["session-earlier-work"])
    ended: list[str] = field(default_factory=list)

    def seed(self) -> TaskTracker:
        self.add({"title": "Epic: audit logging", "description": "Track every agent call"})
        self.add({"title": "Write the audit store", "description": "SQLite", "parent": "T001"})
        return self

    # Each handler takes the call's params, as CLEO's dispatcher passes them.

    def list_sessions(self, params: dict[str, Any]) -> list[str]:
        return list(self.sessions)

    def end_session(self, params: dict[str, Any]) -> str:
        self.ended.append(str(params.get("note", "")))
        return "ended"

    def find(self, params: dict[str, Any]) -> list[str]:
        query = str(params.get("query", "")).lower()
        return [t.id for t in self.tasks.values() if query in t.title.lower()]

    def list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [vars(t) for t in self.tasks.values()]

    def show(self, params: dict[str, Any]) -> dict[str, Any]:
        task_id = str(params.get("taskId"))
        if task_id not in self.tasks:
            raise TaskNotFound(f"task {task_id} not found")
        return vars(self.tasks[task_id])

    def exists(self, params: dict[str, Any]) -> bool:
        return str(params.get("taskId")) in self.tasks

    def add(self, params: dict[str, Any]) -> str:
        parent = params.get("parent")
        if parent is not None and parent not in self.tasks:
            raise TaskNotFound(f"parent {parent} not found")
        task_id = f"T{len(self.tasks) + 1:03d}"
        self.tasks[task_id] = Task(
            task_id, str(params["title"]), str(params.get("description") or ""), parent
        )
        return task_id

    def help(self, params: dict[str, Any]) -> str:
        return "ct-cleo: list sessions, find before list, describe tasks, end sessions"

    def handlers(self) -> dict[tuple[str, str], Callable[[dict[str, Any]], Any]]:
        return {
            ("session", "list"): self.list_sessions,
            ("session", "end"): self.end_session,
            ("tasks", "find"): self.find,
            ("tasks", "list"): self.list,
            ("tasks", "show"): self.show,
            ("tasks", "exists"): self.exists,
            ("tasks", "add"): self.add,
            ("admin", "help"): self.help,
            ("tools", "skill.show"): self.help,
        }


class CliShell:
    """The anti-pattern transport: shelling out to a CLI (no MCP gateway) for everything.

    Records through ``pytest_cleo_grade.capture.record``, i.e. into whatever graded session the
    environment names, the way a separate CLI process would.
    """

    def __init__(self, tracker: TaskTracker) -> None:
        self._handlers = tracker.handlers()

    def run(self, domain: str, operation: str, params: dict[str, Any] | None = None) -> Any:
        call = dict(params or {})
        task_id = call.get("taskId")
        try:
            value = self._handlers[(domain, operation)](call)
        except Exception as exc:
            record(
                domain,
                operation,
                call,
                success=False,
                exit_code=exit_code_for(exc),
                source="cli",
                task_id=task_id,
                error=str(exc),
            )
            raise
        record(domain, operation, call, source="cli", task_id=task_id)
        return value


class DemoAgent:
    """Scripted behaviour for the five scenarios, protocol-following or not."""

    def __init__(self, dispatcher: AuditedDispatcher, tracker: TaskTracker) -> None:
        self.tracker = tracker
        self.mcp = dispatcher
        for (domain, operation), handler in tracker.handlers().items():
            dispatcher.register(domain, operation, handler)
        self.cli = CliShell(tracker)

    def _start(self) -> None:
        """Protocol opening: check sessions, load guidance."""
        self.mcp.query("session", "list")
        self.mcp.query("admin", "help")

    def _end(self) -> None:
        self.mcp.mutate("session", "end", {"note": "done"})

    # 1. Fresh discovery -----------------------------------------------------------------

    def fresh_discovery(self, *, follow_protocol: bool) -> list[str]:
        if follow_protocol:
            self._start()
            found = self.mcp.query("tasks", "find", {"query": "audit"})
            self.mcp.query("tasks", "show", {"taskId": found[0]})
            self._end()
            return list(found)
        # Dives straight into the full task list, twice, never checks or ends sessions.
        tasks = self.mcp.query("tasks", "list")
        self.mcp.query("tasks", "list", {"parent": "T001"})
        return [t["id"] for t in tasks]

    # 2. Task hygiene --------------------------------------------------------------------

    def task_hygiene(self, *, follow_protocol: bool) -> str:
        if follow_protocol:
            self._start()
            self.mcp.query("tasks", "find", {"query": "grading"})
            epic = self.mcp.mutate(
                "tasks", "add", {"title": "Grading", "description": "Grade agent sessions"}
            )
            self.mcp.query("tasks", "exists", {"taskId": epic})
            task = self.mcp.mutate(
                "tasks",
                "add",
                {"title": "Letter scale", "description": "A-F cut-offs", "parent": epic},
            )
            self._end()
            return str(task)
        self._start()
        # No description, subtask without checking its parent, and the same task twice.
        epic = self.mcp.mutate("tasks", "add", {"title": "Grading"})
        self.mcp.mutate("tasks", "add", {"title": "Letter scale", "parent": epic})
        task = self.mcp.mutate(
            "tasks", "add", {"title": "letter scale ", "description": "again", "parent": epic}
        )
        self._end()
        return str(task)

    # 3. Error recovery ------------------------------------------------------------------

    def error_recovery(self, *, follow_protocol: bool) -> str:
        self._start()
        with contextlib.suppress(TaskNotFound):
            self.mcp.query("tasks", "show", {"taskId": "T404"})
        if follow_protocol:
            # Recover by looking the task up before doing anything else.
            found = self.mcp.query("tasks", "find", {"query": "audit store"})
            self.mcp.query("tasks", "show", {"taskId": found[0]})
            self._end()
            return str(found[0])
        # Ignores the error, dumps the whole list instead of searching, and re-creates the
        # task it could not find, twice.
        self.mcp.query("tasks", "list")
        self.mcp.mutate("tasks", "add", {"title": "Audit store", "description": "SQLite"})
        with contextlib.suppress(TaskNotFound):
            self.mcp.query("tasks", "show", {"taskId": "T405"})
        task = self.mcp.mutate("tasks", "add", {"title": "Audit store", "description": "again"})
        self._end()
        return str(task)

    # 4. Full lifecycle ------------------------------------------------------------------

    def full_lifecycle(self, *, follow_protocol: bool) -> str:
        if follow_protocol:
            self._start()
            self.mcp.query("tasks", "find", {"query": "epic"})
            task = self.mcp.mutate(
                "tasks", "add", {"title": "Release notes", "description": "For 0.1.0"}
            )
            self.mcp.query("tasks", "show", {"taskId": task})
            self._end()
            return str(task)
        # Works first, checks sessions afterwards, and walks away without ending the session.
        self.mcp.query("tasks", "find", {"query": "epic"})
        task = self.mcp.mutate(
            "tasks", "add", {"title": "Release notes", "description": "For 0.1.0"}
        )
        # The audit log keeps milliseconds and S1 counts equal timestamps as "before"; a
        # real agent's thinking time guarantees the later tick a fast script must wait for.
        _next_millisecond()
        self.mcp.query("session", "list")
        return str(task)

    # 5. Multi-domain analysis -----------------------------------------------------------

    def multi_domain(self, *, follow_protocol: bool) -> int:
        if follow_protocol:
            self._start()
            self.mcp.query("tools", "skill.show", {"name": "ct-cleo"})
            found = self.mcp.query("tasks", "find", {"query": "a"})
            self.mcp.query("tasks", "show", {"taskId": found[0]})
            self._end()
            return len(found)
        # CLI only: no MCP query gateway, no help or skill lookups, `ct list` to discover.
        self.cli.run("session", "list")
        tasks = self.cli.run("tasks", "list")
        found = [t["id"] for t in tasks if "a" in t["title"]]
        self.cli.run("tasks", "show", {"taskId": found[0]})
        self.cli.run("session", "end")
        return len(found)
