"""How code under test leaves audit entries: ``record()``, ``@audited`` and a dispatcher."""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, ParamSpec, Protocol, TypeVar

from pydantic import ValidationError

from pytest_cleo_grade.capture import _faults as faults
from pytest_cleo_grade.capture._task_ids import TaskIdExtractor, task_id_from_result
from pytest_cleo_grade.core._not_found import exception_exit_code
from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    EntryError,
    StoreError,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.models import (
    AuditEntry,
    format_validation_error,
    non_finite_path,
    not_a_json_number,
)
from pytest_cleo_grade.store import AuditStore

__all__ = [
    "ENV_AUDIT_DB",
    "ENV_GRADE",
    "ENV_GRADE_ID",
    "ENV_SESSION_ID",
    "GATEWAYS",
    "MUTATE_GATEWAYS",
    "AuditedDispatcher",
    "Holder",
    "Recorder",
    "UnknownOperationError",
    "active_session",
    "audited",
    "exit_code_for",
    "held_by",
    "hold_in_process",
    "make_entry",
    "record",
    "record_entry",
    "refuse",
    "store_for",
]

ENV_GRADE: Final = "CLEO_SESSION_GRADE"
ENV_GRADE_ID: Final = "CLEO_SESSION_GRADE_ID"
ENV_SESSION_ID: Final = "CLEO_SESSION_ID"
ENV_AUDIT_DB: Final = "CLEO_AUDIT_DB"

#: Outside grade mode CLEO audits only writes, i.e. calls through these gateways.
MUTATE_GATEWAYS: Final = frozenset({"cleo_mutate", "mutate"})
#: The gateway spellings CLEO writes (DESIGN §2): a call recorded here with another one is a
#: typo that would silently cost the query-gateway points. (Entries read from files and
#: stores keep whatever they hold: they are someone else's record.)
GATEWAYS: Final = frozenset({"cleo_query", "query", *MUTATE_GATEWAYS})
E_NOT_FOUND: Final = 4

P = ParamSpec("P")
R = TypeVar("R")


class Recorder(Protocol):
    """Anything with ``record()``'s signature (the module function, a GradeSession)."""

    def __call__(
        self,
        domain: str,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        success: bool | None = None,
        exit_code: int = 0,
        duration: float | None = None,
        gateway: str | None = None,
        source: str = "mcp",
        task_id: str | None = None,
        error: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AuditEntry | None: ...


def make_entry(
    session_id: str | None,
    domain: str,
    operation: str,
    params: Mapping[str, Any] | None = None,
    *,
    success: bool | None = None,
    exit_code: int = 0,
    duration: float | None = None,
    gateway: str | None = None,
    source: str = "mcp",
    task_id: str | None = None,
    error: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    refused: Callable[[str], None] | None = None,
) -> AuditEntry:
    """Build (and validate) the entry of one call made now; EntryError names the bad field.

    ``metadata`` adds keys to the entry's metadata (e.g. ``injected``), never replacing the
    ones above. ``refused`` hears the EntryError's text first (see :func:`refuse`)."""
    problem = _recording_problem(gateway, metadata, params)
    if problem is not None:
        message = f"{domain}.{operation}: {problem}"
        if refused is not None:
            refused(message)
        raise EntryError(message)
    try:
        return AuditEntry(
            timestamp=datetime.now(UTC),
            session_id=session_id,
            domain=domain,
            operation=operation,
            params=dict(params) if params is not None else {},
            result={
                # Unsaid, a call succeeded exactly when its exit code is 0 (record(...,
                # exit_code=4) is a not-found, as `cleo-grade record --exit-code 4` is).
                "success": exit_code == 0 if success is None else success,
                "exit_code": exit_code,
                "duration": 0 if duration is None else duration,
            },
            metadata={
                **(metadata or {}),
                "source": source,
                "gateway": gateway,
                "task_id": task_id,
            },
            error=error,
        )
    except ValidationError as exc:
        message = format_validation_error(exc, f"{domain}.{operation}")
        if refused is not None:
            refused(message)
        raise EntryError(message) from exc


def _recording_problem(
    gateway: str | None, metadata: Mapping[str, Any] | None, params: object = None
) -> str | None:
    """Why a call cannot be recorded as given, beyond what the entry model checks: params or
    metadata that are not a mapping (a bare TypeError the refusals never heard of), a gateway
    CLEO never writes (a typo losing the query-gateway points), a non-finite number in extra
    metadata (stored as JSON: the store would refuse it, after the test was graded with it).
    Checked here, where calls are recorded, not for every entry read (files hold no NaN)."""
    for name, value in (("params", params), ("metadata", metadata)):
        if value is not None and not isinstance(value, Mapping):
            return f"{name}: must be a mapping of names to values, not {type(value).__name__}"
    if gateway is not None and gateway not in GATEWAYS:
        return f"gateway {gateway!r} is not one of cleo_query, query, cleo_mutate, mutate (or None)"
    if metadata:
        try:
            where = non_finite_path(dict(metadata))
        except ValueError as exc:  # nested past what can be stored and read back
            return f"metadata: {exc}"
        if where is not None:
            return f"metadata: {not_a_json_number(where)}"
    return None


def active_session() -> tuple[str, Path, bool] | None:
    """The session the environment names: (session id, store path, grade mode), or None.

    With none named, the one graded session this process holds, if it holds exactly one: a
    test that cleared the environment (``mock.patch.dict(os.environ, clear=True)``) is still
    that test, and its calls must not vanish from its grade.
    """
    env = os.environ
    key = (
        env.get(ENV_AUDIT_DB),
        env.get(ENV_GRADE),
        env.get(ENV_GRADE_ID),
        env.get(ENV_SESSION_ID),
    )
    found = _active.get(key)
    if found is None:
        found = _active[key] = _parse_active(*key)
    return found or (_only_held() if _holders else None)


def _only_held() -> tuple[str, Path, bool] | None:
    pid = os.getpid()
    mine = [(session_id, held[1]) for session_id, held in _holders.items() if held[0] == pid]
    if len(mine) != 1:
        return None
    session_id, holder = mine[0]
    return session_id, holder.db_path, True


def _parse_active(
    db: str | None, grade: str | None, grade_id: str | None, session_id: str | None
) -> tuple[str, Path, bool] | tuple[()]:
    if not db:
        return ()
    grade_mode = (grade or "").lower() == "true"
    chosen = (grade_id if grade_mode else None) or session_id
    if not chosen:
        return ()
    return chosen, Path(db).absolute(), grade_mode


# record() runs once per call of the code under test: parsing the environment and opening
# the store happen once per distinct setting, not per call. () caches "no session".
_active: dict[tuple[str | None, ...], tuple[str, Path, bool] | tuple[()]] = {}

# One open store per (process, path): a connection must not cross a fork, and reopening the
# store for every call would cost more than the write itself. The file's identity is checked
# on every call (one stat) so a store deleted and recreated meanwhile is reopened rather than
# written through a connection to the unlinked file, where entries would vanish.
_stores: dict[tuple[int, Path], tuple[AuditStore, tuple[int, int]]] = {}
_stores_lock = threading.Lock()


def _close_stores() -> None:
    """Close this process's cached stores at exit: an open connection left to the garbage
    collector is a ResourceWarning on Python 3.13 (an error where warnings are errors)."""
    pid = os.getpid()
    with _stores_lock:
        for key in [key for key in _stores if key[0] == pid]:
            _stores.pop(key)[0].close()


atexit.register(_close_stores)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _store_for(path: Path) -> AuditStore:
    key = (os.getpid(), path)
    cached = _stores.get(key)
    if cached is not None and cached[1] == _identity(path):
        return cached[0]
    with _stores_lock:
        if _stores.get(key) is not cached:  # another thread reopened it meanwhile
            return _stores[key][0]
        if cached is not None:
            cached[0].close()  # same process (the key holds the pid), so safe to close
        store = AuditStore(path)
        identity = _identity(path)
        assert identity is not None  # AuditStore created the file
        _stores[key] = (store, identity)
    return store


class Holder(Protocol):
    """What holds a session's entries in this process (the pytest process's GradeSession)."""

    def hold(self, entry: AuditEntry) -> None:
        """Take one entry recorded into the session."""

    def refuse(self, reason: str) -> None:
        """Note a call of the session that could not become an entry (EntryError's text)."""

    @property
    def db_path(self) -> Path:
        """The session's store (absolute)."""


#: Sessions that hold their entries in this process (session id -> (pid, holder)). A
#: GradeSession in the pytest process grades what it holds and writes it in one transaction
#: when the test is graded, so record() in that process hands entries to it instead of the
#: store. The pid keeps a forked child (which gets a copy of this dict) writing to the store.
_holders: dict[str, tuple[int, Holder]] = {}


def hold_in_process(session_id: str, holder: Holder | None) -> None:
    """Route :func:`record` calls of this process for ``session_id`` to ``holder`` (None:
    stop)."""
    if holder is None:
        _holders.pop(session_id, None)
    else:
        _holders[session_id] = (os.getpid(), holder)


def _holder(session_id: str) -> Holder | None:
    held = _holders.get(session_id)
    return held[1] if held is not None and held[0] == os.getpid() else None


def _readable(session_id: str) -> bool:
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are no UTF-8, read with surrogateescape
        return False
    return True


def _refuse_unreadable_id(session_id: str, path: Path, what: str) -> None:
    """A call made while the session's id in the environment is not UTF-8 text (bytes an
    agent's process mangled): no entry can carry that id, so the call is refused, told to
    the session (the test fails saying so), and never raised into the code under test."""
    reason = (
        f"{what} not recorded: {ENV_GRADE_ID}/{ENV_SESSION_ID} is not UTF-8 text "
        f"({ascii(session_id)[:60]})"
    )
    held = _only_held()
    holder = _holder(held[0]) if held is not None else None
    if holder is not None:
        holder.refuse(reason)
    else:
        # A child: the session's other variable may still name it readably.
        from pytest_cleo_grade.capture._refusals import note_refusal

        for name in (ENV_SESSION_ID, ENV_GRADE_ID):
            other = os.environ.get(name)
            if other and _readable(other):
                note_refusal(path, other, reason)
                break
    with warnings_shown_not_raised():
        warnings.warn(f"cleo-grade: {reason}", CleoGradeWarning, stacklevel=3)


def held_by(session_id: str) -> Holder | None:
    """What holds ``session_id`` in this process (its GradeSession), or None."""
    return _holder(session_id)


def store_for(path: Path) -> AuditStore:
    """This process's open store at ``path`` (opened, or reopened, as needed)."""
    return _store_for(path)


def refuse(reason: str) -> None:
    """Tell the session held in this process that one of its calls was not recorded.

    A call the code under test made but that could not become an entry (a NaN in its
    parameters, an unserialisable argument) would leave the session graded on part of its
    calls; the session fails its test instead, however the code under test handled the error.
    """
    active = active_session()
    if active is None:
        return
    if not _readable(active[0]):
        _refuse_unreadable_id(active[0], active[1], "a call")
        return
    holder = _holder(active[0])
    if holder is not None:
        holder.refuse(reason)
    else:
        # Another process than the one grading the session (a child the test started).
        from pytest_cleo_grade.capture._refusals import note_refusal

        note_refusal(active[1], active[0], reason)


def record(
    domain: str,
    operation: str,
    params: Mapping[str, Any] | None = None,
    *,
    success: bool | None = None,
    exit_code: int = 0,
    duration: float | None = None,
    gateway: str | None = None,
    source: str = "mcp",
    task_id: str | None = None,
    error: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> AuditEntry | None:
    """Record one call into the graded session the environment names.

    In the process that holds the session (the pytest process of a graded test) the entry
    goes to the session, which stores it when the test is graded; elsewhere (a subprocess,
    another worker) it goes to the store and is durable when this returns.

    A no-op returning None when no session is active (``CLEO_AUDIT_DB`` and a session id are
    not set) and, outside grade mode, for calls that are not mutations, as CLEO's audit
    middleware does. Invalid arguments raise EntryError; a store that cannot be written
    (a full disk, a read-only directory) gives a CleoGradeWarning instead of breaking the code
    under test, and None.
    """
    active = active_session()
    if active is None:
        return None
    session_id, path, grade_mode = active
    if not grade_mode and gateway not in MUTATE_GATEWAYS:
        return None
    if not _readable(session_id):
        _refuse_unreadable_id(session_id, path, f"{domain}.{operation}")
        return None
    entry = make_entry(
        session_id,
        domain,
        operation,
        params,
        success=success,
        exit_code=exit_code,
        duration=duration,
        gateway=gateway,
        source=source,
        task_id=task_id,
        error=error,
        metadata=metadata,
        refused=refuse,
    )
    return _deliver(entry, session_id, path, raise_invalid=True)


def record_entry(entry: AuditEntry) -> AuditEntry | None:
    """Record a ready-made entry (its own timestamp, e.g. a span's start) like :func:`record`.

    The entry is tagged with the active session's id; the same rules apply (None without a
    session, and for non-mutations outside grade mode; a storage failure is a warning).
    """
    active = active_session()
    if active is None:
        return None
    session_id, path, grade_mode = active
    if not grade_mode and entry.metadata.gateway not in MUTATE_GATEWAYS:
        return None
    if not _readable(session_id):
        _refuse_unreadable_id(session_id, path, f"{entry.domain}.{entry.operation}")
        return None
    if entry.session_id != session_id:
        entry = entry.model_copy(update={"session_id": session_id})
    return _deliver(entry, session_id, path)


def _deliver(
    entry: AuditEntry, session_id: str, path: Path, *, raise_invalid: bool = False
) -> AuditEntry | None:
    holder = _holder(session_id)
    if holder is not None:
        holder.hold(entry)
        return entry
    try:
        _store_for(path).append(entry)
    except (StoreError, EntryError) as exc:
        # A store that cannot be written, or an entry it cannot hold (text that is not
        # Unicode): the test is told, and fails for a session graded without the call. The
        # code under test gets a warning, except record()'s caller for its own bad arguments
        # (an adapter's call, recorded for a framework, never raises into it).
        from pytest_cleo_grade.capture._refusals import note_refusal

        note_refusal(path, session_id, f"{entry.domain}.{entry.operation} not stored: {exc}")
        if raise_invalid and isinstance(exc, EntryError):
            raise
        # The code under test goes on whatever the test run's warning filters say.
        with warnings_shown_not_raised():
            warnings.warn(
                f"cleo-grade: audit entry {entry.domain}.{entry.operation} not recorded: {exc}",
                CleoGradeWarning,
                stacklevel=3,
            )
        return None
    return entry


def exit_code_for(exc: BaseException) -> int:
    """The exit code a failed call is recorded with: the rules every adapter shares
    (:mod:`pytest_cleo_grade.core._not_found`).

    An integer ``exit_code`` attribute wins; a not-found is CLEO's E_NOT_FOUND (4):
    LookupError (KeyError, IndexError), FileNotFoundError, a class named ``...NotFound``/
    ``...NotFoundError``, HTTP 404, or a message that says not found; anything else is 1.
    """
    return exception_exit_code(exc)


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _call_params(signature: inspect.Signature, args: Any, kwargs: Any) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        # The call itself is wrong and will raise; record what was passed.
        return {"args": list(args), **kwargs}
    params: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if name in {"self", "cls"}:
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            params.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            params[name] = list(value)
        else:
            params[name] = value
    return params


def audited(
    domain: str,
    operation: str,
    *,
    gateway: str | None = None,
    source: str = "mcp",
    recorder: Recorder | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a tool function so every call is recorded as ``domain.operation``.

    The call's arguments become the params, its wall time the duration. An exception is
    recorded as a failure (exit code from :func:`exit_code_for`) and then propagates
    unchanged. Coroutine functions are awaited. ``recorder`` defaults to :func:`record`.
    A fault ``graded_session.inject()`` queued for ``domain.operation`` fails the call before
    the function runs: it is recorded (marked ``metadata.injected``) and raised as
    :class:`~pytest_cleo_grade.capture._faults.InjectedFault`, as the audited dispatcher does.
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(func)

        def emit(params: dict[str, Any], started: float, exc: BaseException | None) -> None:
            rec = recorder or record
            # metadata only for an injected failure: a recorder written before faults were
            # (a function with record()'s older signature) keeps working.
            marked: dict[str, Any] = (
                {"metadata": {faults.INJECTED_KEY: True}}
                if isinstance(exc, faults.InjectedFault)
                else {}
            )
            rec(
                domain,
                operation,
                params,
                success=exc is None,
                exit_code=0 if exc is None else exit_code_for(exc),
                duration=(time.perf_counter() - started) * 1000.0,
                gateway=gateway,
                source=source,
                error=None if exc is None else _error_text(exc),
                **marked,
            )

        def fail_if_injected(params: dict[str, Any], started: float) -> None:
            # The environment is read only while some test has a fault queued.
            if not faults.any_queued():
                return
            active = active_session()
            fault = faults.take(active[0] if active else None, domain, operation)
            if fault is not None:
                injected = faults.InjectedFault(fault)
                emit(params, started, injected)
                raise injected

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                params = _call_params(signature, args, kwargs)
                started = time.perf_counter()
                fail_if_injected(params, started)
                try:
                    value = await func(*args, **kwargs)
                except Exception as exc:
                    emit(params, started, exc)
                    raise
                emit(params, started, None)
                return value

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            params = _call_params(signature, args, kwargs)
            started = time.perf_counter()
            fail_if_injected(params, started)
            try:
                value = func(*args, **kwargs)
            except Exception as exc:
                emit(params, started, exc)
                raise
            emit(params, started, None)
            return value

        return wrapper

    return decorate


class UnknownOperationError(CleoGradeError, LookupError):
    """The dispatcher has no handler for a domain.operation (CLEO's E_INVALID_OPERATION)."""

    exit_code = 2


Handler = Callable[[dict[str, Any]], Any]


class AuditedDispatcher:
    """CLEO's gateway shape: handlers per ``domain.operation``, called through query/mutate.

    Every call is recorded with its params, outcome, duration and gateway (``cleo_query`` for
    :meth:`query`, ``cleo_mutate`` for :meth:`mutate`), including calls that fail and calls
    to operations nobody registered. ``recorder`` defaults to :func:`record` (the session the
    environment names).
    """

    def __init__(
        self,
        *,
        recorder: Recorder | None = None,
        source: str = "mcp",
        session_id: str | None = None,
        task_id_from: TaskIdExtractor | None = task_id_from_result,
    ) -> None:
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._recorder = recorder
        self.source = source
        #: ``(domain, operation, result) -> id``: the task a call that names none in its
        #: params concerns (by default the id a ``tasks.add`` result carries); None: never.
        self._task_id_from = task_id_from
        #: Whose injected faults apply (None: the session the environment names).
        self._session_id = session_id

    def register(
        self, domain: str, operation: str, handler: Handler | None = None
    ) -> Callable[[Handler], Handler]:
        """Register ``handler(params)`` for ``domain.operation``; usable as a decorator."""

        def add(func: Handler) -> Handler:
            self._handlers[(domain, operation)] = func
            return func

        if handler is not None:
            add(handler)
        return add

    def query(self, domain: str, operation: str, params: Mapping[str, Any] | None = None) -> Any:
        """Call a read operation through the query gateway."""
        return self._dispatch("cleo_query", domain, operation, params)

    def mutate(self, domain: str, operation: str, params: Mapping[str, Any] | None = None) -> Any:
        """Call a write operation through the mutate gateway."""
        return self._dispatch("cleo_mutate", domain, operation, params)

    def _dispatch(
        self, gateway: str, domain: str, operation: str, params: Mapping[str, Any] | None
    ) -> Any:
        call_params = dict(params) if params is not None else {}
        handler = self._handlers.get((domain, operation))
        started = time.perf_counter()
        session_id = self._session_id
        if session_id is None:
            active = active_session()
            session_id = active[0] if active else None
        fault = faults.take(session_id, domain, operation)
        if fault is not None:
            # An injected failure: the handler never runs; the call is recorded like a real
            # failure and marked, and the caller gets the exception a failing handler gives.
            injected = faults.InjectedFault(fault)
            self._emit(gateway, domain, operation, call_params, started, injected)
            raise injected
        try:
            if handler is None:
                raise UnknownOperationError(f"no handler registered for {domain}.{operation}")
            # The handler gets its own copy: one that pops or defaults keys must not change
            # the params recorded for the call (a popped description would cost S3 points).
            value = handler(dict(call_params))
        except Exception as exc:
            self._emit(gateway, domain, operation, call_params, started, exc)
            raise
        self._emit(gateway, domain, operation, call_params, started, None, value)
        return value

    def _emit(
        self,
        gateway: str,
        domain: str,
        operation: str,
        params: dict[str, Any],
        started: float,
        failure: Exception | None,
        value: Any = None,
    ) -> None:
        task_id = params.get("taskId")
        if not isinstance(task_id, str) and failure is None and self._task_id_from is not None:
            # The id the call's answer names (tasks.add returns the task it created): S3's
            # per-task flag names it, as the specification's does.
            try:
                task_id = self._task_id_from(domain, operation, value)
            except Exception as exc:
                # The user's extractor failing must not lose the call: recorded without an id.
                warnings.warn(
                    f"cleo-grade: task_id_from failed for {domain}.{operation}: {exc!r}",
                    CleoGradeWarning,
                    stacklevel=4,
                )
                task_id = None
        (self._recorder or record)(
            domain,
            operation,
            params,
            success=failure is None,
            exit_code=0 if failure is None else exit_code_for(failure),
            duration=(time.perf_counter() - started) * 1000.0,
            gateway=gateway,
            source=self.source,
            task_id=task_id if isinstance(task_id, str) else None,
            error=None if failure is None else _error_text(failure),
            **(
                {"metadata": {faults.INJECTED_KEY: True}}
                if isinstance(failure, faults.InjectedFault)
                else {}
            ),
        )
