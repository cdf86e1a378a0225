"""CLEO's gateway shape for grades: ``cleo_query``/``cleo_mutate`` with {domain, operation, params}.

What ``cleo-grade mcp`` serves, with no MCP in it (the SDK is imported by ``_mcp_app`` alone).
Every call answers with CLEO's envelope: ``{"success": true, "data": ...}`` or ``{"success":
false, "error": {"code", "exitCode", "message", "fix"?}}``, both with ``_meta`` naming the call.

The operations:

- ``cleo_query admin grade {sessionId}``: the session graded from the store (nothing saved:
  the query gateway only reads; ``session end`` saves), as ``cleo-grade grade --json`` prints it;
- ``cleo_query admin grade.list {sessionId?}``: the history, oldest first;
- ``cleo_mutate session start {grade?, scope?, name?}``: a new session and its variables;
- ``cleo_mutate session end {sessionId?}``: the session graded and saved (history and the
  store's grades table); without an id, the latest one this server started and did not end,
  else the one the server's environment names.

The server records nothing and never sets its own environment: its calls are not the agent's.
"""

from __future__ import annotations

import argparse
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pytest_cleo_grade.cli.common import CommandError, db_path, history_path, session_id_arg
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError, HistoryError, StoreError
from pytest_cleo_grade.store._persist import PersistError

__all__ = ["GATEWAYS", "OPERATIONS", "Gateway", "GatewayError"]

GATEWAYS: Final = ("cleo_query", "cleo_mutate")

#: Every operation served, by gateway: (domain, operation) -> its params, for the tools'
#: descriptions and the error that lists them.
OPERATIONS: Final[dict[str, dict[tuple[str, str], str]]] = {
    "cleo_query": {
        ("admin", "grade"): '{"sessionId": "<id>"}',
        ("admin", "grade.list"): '{"sessionId"?: "<id>"}',
    },
    "cleo_mutate": {
        ("session", "start"): '{"grade": true, "scope"?: "epic:T001", "name"?: "..."}',
        ("session", "end"): '{"sessionId"?: "<id>"}',
    },
}


class GatewayError(Exception):
    """A call that fails: CLEO's error code and exit code, a message, and what to do."""

    def __init__(self, code: str, exit_code: int, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.exit_code = exit_code
        self.message = message
        self.fix = fix

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.code,
            "exitCode": self.exit_code,
            "message": self.message,
        }
        if self.fix is not None:
            error["fix"] = self.fix
        return error


def _invalid(message: str, fix: str | None = None) -> GatewayError:
    return GatewayError("E_INVALID_INPUT", 2, message, fix)


def _not_found(message: str, fix: str | None = None) -> GatewayError:
    return GatewayError("E_NOT_FOUND", 4, message, fix)


def _listing(gateway: str) -> str:
    return ", ".join(f"{d} {o}" for d, o in OPERATIONS[gateway])


@dataclass
class _Call:
    gateway: str
    domain: str
    operation: str
    params: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.gateway} {self.domain} {self.operation}"


class Gateway:
    """The operations over one audit store and one history (``--db``, ``--history`` and the
    rubric options of ``args``, resolved once, absolute)."""

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> None:
        self._args = args
        self.db = db_path(args).absolute()
        self.history = history_path(args).absolute()
        self._env = dict(os.environ if env is None else env)
        #: Sessions this server started and did not end, oldest first.
        self._open: list[str] = []
        # The MCP server runs each call in a worker thread: one at a time keeps the store's
        # writes and the list of open sessions simple (grading is milliseconds).
        self._lock = threading.Lock()

    def call(
        self, gateway: str, domain: object, operation: object, params: object
    ) -> tuple[dict[str, Any], bool]:
        """The envelope of one call and whether it failed (the MCP result's isError)."""
        meta = {"gateway": gateway, "domain": domain, "operation": operation}
        try:
            call = _Call(gateway, *_checked_call(domain, operation, params))
            with self._lock, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                data = self._dispatch(call)
        except GatewayError as exc:
            return {"success": False, "error": exc.to_json(), "_meta": meta}, True
        if caught:
            meta["warnings"] = [str(w.message) for w in caught]
        return {"success": True, "data": data, "_meta": meta}, False

    def _dispatch(self, call: _Call) -> Any:
        handlers: dict[tuple[str, str, str], Callable[[_Call], Any]] = {
            ("cleo_query", "admin", "grade"): self._grade,
            ("cleo_query", "admin", "grade.list"): self._grade_list,
            ("cleo_mutate", "session", "start"): self._start,
            ("cleo_mutate", "session", "end"): self._end,
        }
        handler = handlers.get((call.gateway, call.domain, call.operation))
        if handler is None:
            raise _unknown(call)
        try:
            return handler(call)
        except CommandError as exc:
            text = str(exc)
            if exc.status == 4:
                raise _not_found(text) from None
            raise _invalid(text) from None
        except (StoreError, HistoryError, EntryError, PersistError) as exc:
            # The store, the history or their rows: what CLEO calls a file error.
            raise GatewayError("E_FILE_ERROR", 3, f"{call.where}: {exc}") from None
        except CleoGradeError as exc:
            raise GatewayError("E_GENERAL_ERROR", 1, f"{call.where}: {exc}") from None

    # -- operations ------------------------------------------------------------------

    def _grade(self, call: _Call) -> Any:
        from pytest_cleo_grade.cli._sessions import grade_known_session

        _allow(call, {"sessionId"})
        session_id = _session_param(call, required=True)
        assert session_id is not None
        result = grade_known_session(self._args, self.db, session_id, where=call.where)
        return result.to_report_dict()

    def _grade_list(self, call: _Call) -> Any:
        from pytest_cleo_grade.store._history_index import grades_where
        from pytest_cleo_grade.store.history import iter_grades

        _allow(call, {"sessionId"})
        session_id = _session_param(call, required=False)
        # One session's: through the history's index only its lines are read.
        found = (
            None
            if session_id is None
            else grades_where(self.history, "session_id = ?", (session_id,))
        )
        grades = iter_grades(self.history, session_id=session_id) if found is None else found
        return [g.to_report_dict() for g in grades]

    def _start(self, call: _Call) -> Any:
        from pytest_cleo_grade.cli._sessions import checked_text, start_session

        _allow(call, {"grade", "scope", "name"})
        grade = call.params.get("grade", False)
        if not isinstance(grade, bool):
            raise _invalid(f"{call.where}: params.grade must be true or false")
        try:
            scope = checked_text(call.params.get("scope"), "params.scope")
            name = checked_text(call.params.get("name"), "params.name")
        except ValueError as exc:
            raise _invalid(f"{call.where}: {exc}") from None
        started = start_session(self.db, grade=grade, scope=scope, name=name)
        self._open.append(started.session_id)
        return started.to_json()

    def _end(self, call: _Call) -> Any:
        from pytest_cleo_grade.cli._grading import save_grade
        from pytest_cleo_grade.cli._sessions import grade_known_session

        _allow(call, {"sessionId"})
        session_id = _session_param(call, required=False) or self._current(call)
        result = grade_known_session(self._args, self.db, session_id, where=call.where)
        save_grade(result, history=self.history, store=self.db)
        if session_id in self._open:
            self._open.remove(session_id)
        return result.to_report_dict()

    def _current(self, call: _Call) -> str:
        if self._open:
            return self._open[-1]
        named = self._env.get("CLEO_SESSION_GRADE_ID") or self._env.get("CLEO_SESSION_ID")
        if named:
            return named
        raise _not_found(
            f"{call.where}: no current session (none started here, and the server's "
            "environment names none)",
            fix='pass params {"sessionId": "<id>"}, or start one with cleo_mutate session start',
        )


def _checked_call(
    domain: object, operation: object, params: object
) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(domain, str) or not domain:
        raise _invalid("domain must be a non-empty string")
    if not isinstance(operation, str) or not operation:
        raise _invalid("operation must be a non-empty string")
    if isinstance(params, str):
        # Some clients send the params object as JSON text.
        from pytest_cleo_grade.core._files import parse_json_strict

        try:
            params = parse_json_strict(params) if params.strip() else None
        except ValueError as exc:
            raise _invalid(f"params is not valid JSON: {exc}") from None
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _invalid(f"params must be an object, got {type(params).__name__}")
    return domain, operation, params


def _unknown(call: _Call) -> GatewayError:
    other = next(g for g in GATEWAYS if g != call.gateway)
    if (call.domain, call.operation) in OPERATIONS[other]:
        kind = "a mutation" if other == "cleo_mutate" else "a query"
        return _not_found(
            f"{call.where}: {call.domain} {call.operation} is {kind}",
            fix=f"call it through {other}",
        )
    known_domains = {d for ops in OPERATIONS.values() for d, _ in ops}
    what, name = (
        ("operation", call.operation) if call.domain in known_domains else ("domain", call.domain)
    )
    return _not_found(
        f"{call.where}: unknown {what} {name!r}",
        fix=f"{call.gateway} serves: {_listing(call.gateway)}",
    )


def _allow(call: _Call, names: set[str]) -> None:
    unknown = sorted(set(call.params) - names)
    if unknown:
        expected = OPERATIONS[call.gateway][(call.domain, call.operation)]
        raise _invalid(
            f"{call.where}: unknown params {', '.join(map(repr, unknown))}",
            fix=f"params: {expected}",
        )


def _session_param(call: _Call, *, required: bool) -> str | None:
    value = call.params.get("sessionId")
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise _invalid(
            f"{call.where}: params.sessionId must be a non-empty string",
            fix=f"params: {OPERATIONS[call.gateway][(call.domain, call.operation)]}",
        )
    try:
        session_id_arg(value)
    except argparse.ArgumentTypeError as exc:
        raise _invalid(f"{call.where}: params.sessionId: {exc}") from None
    return value
