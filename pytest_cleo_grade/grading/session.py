"""A graded session's lifecycle: environment, recording, grading and the one persist() (no pytest).

:class:`GradeSession` is what the ``graded_session`` fixture yields. How it grades is a
:class:`Grader` strategy given at construction (the plugin passes the test's own rubric, see
:mod:`pytest_cleo_grade.grading._grader`); without one it grades with CLEO's rubric.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, field_validator

from pytest_cleo_grade.capture import _faults as faults
from pytest_cleo_grade.capture._faults import Fault
from pytest_cleo_grade.capture._ingest import load_conversation, load_file
from pytest_cleo_grade.capture._one_call import one_entry_per_call as _one_per_call
from pytest_cleo_grade.capture.audit import (
    ENV_AUDIT_DB,
    ENV_GRADE,
    ENV_GRADE_ID,
    ENV_SESSION_ID,
    AuditedDispatcher,
    hold_in_process,
    make_entry,
)
from pytest_cleo_grade.core._conversation import (
    MAX_ITEMS,
    Conversation,
    Message,
    ModelCall,
    merge,
    new_call_id,
)
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError, StoreError
from pytest_cleo_grade.core.models import AuditEntry, GradeResult, coerce_entries, order_entries
from pytest_cleo_grade.rubrics.cleo import grade_ordered
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store._persist import persist

if TYPE_CHECKING:
    from pytest_cleo_grade.capture.otlp import OtlpReceiver

__all__ = [
    "ENV_AUDIT_DB",
    "ENV_GRADE",
    "ENV_GRADE_ID",
    "ENV_SESSION_ID",
    "GradeSession",
    "Grader",
    "SessionSettings",
    "new_session_id",
]

_ENV_NAMES = (ENV_GRADE, ENV_GRADE_ID, ENV_SESSION_ID, ENV_AUDIT_DB)


_issued_lock = threading.Lock()
_issued: dict[int, set[str]] = {}


def new_session_id() -> str:
    """A new id in CLEO's style, ``session-<epoch ms>-<6 hex>``, never repeated in a process.

    24 random bits on top of the millisecond keep ids from pytest-xdist workers that start
    in the same millisecond apart. Within one process, hundreds of ids in one millisecond
    would collide by the birthday bound (two sessions merged), so the suffixes already
    issued in the current millisecond are drawn again.
    """
    millis = time.time_ns() // 1_000_000
    with _issued_lock:
        taken = _issued.get(millis)
        if taken is None:
            _issued.clear()  # earlier milliseconds can never be issued again
            taken = _issued[millis] = set()
        suffix = secrets.token_hex(3)
        while suffix in taken:
            suffix = secrets.token_hex(3)
        taken.add(suffix)
    return f"session-{millis}-{suffix}"


#: How many recordings look for a current trace (see GradeSession._note_trace).
_TRACE_LOOKS = 32
_TRACE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.:-]{0,199}")


def current_trace_id() -> str | None:
    """The trace active here now: OpenTelemetry's current span's, else the Langfuse SDK's
    current trace (each only when the program already imported it), else None."""
    if "opentelemetry.trace" in sys.modules:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return format(context.trace_id, "032x")
    # Without keys the SDK's client is disabled (and logs that it is): no trace to ask for.
    if "langfuse" in sys.modules and os.environ.get("LANGFUSE_PUBLIC_KEY"):
        try:
            import langfuse

            found = langfuse.get_client().get_current_trace_id()
        except Exception:  # an SDK without keys, or an older one: no trace to tell
            return None
        if isinstance(found, str) and _TRACE_ID.fullmatch(found):
            return found
    return None


#: Within this time, the same message (role and text) seen twice is one message.
_SAME_MESSAGE_WINDOW = timedelta(seconds=5)


def _first_problem(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "value"
        return f"{field}: {str(first['msg']).removeprefix('Value error, ')}"
    return str(exc)


class SessionSettings(BaseModel):
    """Where a graded session keeps its entries and its grades."""

    model_config = ConfigDict(frozen=True)

    db_path: Path
    history_path: Path | None = None

    @field_validator("db_path", "history_path")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        # Subprocesses may run in another directory; the path they inherit must still hold.
        return None if value is None else value.absolute()


class Grader(Protocol):
    """How a session is graded: a rubric, its settings and the test's context."""

    def __call__(self, session: GradeSession, /, *, now: datetime | None = None) -> GradeResult:
        """Grade ``session`` now; raises CleoGradeError when it cannot be graded."""
        ...


def cleo_grader(session: GradeSession, /, *, now: datetime | None = None) -> GradeResult:
    """The default Grader: CLEO's rubric over the session's entries."""
    return grade_ordered(session.entries, session_id=session.id, now=now)


class GradeSession:
    """A grade-mode session: start it, let code record into it, grade it, persist, close.

    ``start()`` opens (creating) the store and sets CLEO's grade-mode variables so that code
    under test, in this process or in any child that inherits the environment, records into
    this session; ``close()`` puts the previous environment back exactly.
    """

    def __init__(
        self,
        settings: SessionSettings,
        *,
        session_id: str | None = None,
        store: AuditStore | None = None,
        grader: Grader | None = None,
    ) -> None:
        """``store``: an open store of ``settings.db_path`` to borrow (it is not closed).
        ``grader``: how :meth:`grade` grades (default: CLEO's rubric).

        Opening a store costs a connection, pragmas and a schema check; a test run that
        starts a session per test shares one instead.
        """
        if store is not None and store.path.absolute() != settings.db_path:
            raise CleoGradeError(f"store {store.path} is not the session's {settings.db_path}")
        self.settings = settings
        self.id = session_id or new_session_id()
        self._borrowed = store
        self._store: AuditStore | None = None
        self._saved_env: dict[str, str | None] | None = None
        self._dispatcher: AuditedDispatcher | None = None
        #: Entries recorded in this process and not yet written to the store (see flush()).
        self._held: list[AuditEntry] = []
        #: The four variables as they were before :meth:`start` (None: not started yet);
        #: kept after :meth:`close` restored them, for whoever must restore them again.
        self.env_before: dict[str, str | None] | None = None
        #: Why calls of this session could not be recorded (EntryError texts, in order): a
        #: session missing calls is not graded (see grading.grade_test).
        self.refused: list[str] = []
        #: Where the store's refusals file ended when the session started (see refusals()).
        self._refusals_from = 0
        self._version: int | None = None
        #: Whether this session wrote to the store itself (flush()): then it must be read.
        self._flushed = False
        self.grader: Grader = grader or cleo_grader
        #: The latest grade: None until the test grades explicitly or its body ends.
        self.result: GradeResult | None = None
        #: How many held entries the latest grade saw (None: not graded yet).
        self._graded_held: int | None = None
        #: The store's data version when the latest grade was made, and how many of the
        #: session's entries it held then (other processes record straight into it).
        self._graded_version: int | None = None
        self._graded_stored = 0
        #: The data version before the latest read of the session since a grade began, and
        #: how many stored and held entries that read returned: what the grade saw, when
        #: calls kept coming while it graded (a judge takes seconds).
        self._read: tuple[int, int, int] | None = None
        #: What :meth:`set_output` handed over for a model comparison (None: nothing yet).
        self.output: str | None = None
        self.scores: Mapping[str, Any] | None = None
        self.run_facts: Mapping[str, Any] | None = None
        #: The loopback OTLP receiver, started by the first use of ``otlp_endpoint``.
        self._receiver: OtlpReceiver | None = None
        #: The receiver once stopped (what it refused is still told).
        self._stopped_receiver: OtlpReceiver | None = None
        #: How many refusals in this process the latest grade had seen (None: no grade yet).
        self._graded_refused: int | None = None
        #: The conversation captured in this process and not yet stored (see flush()):
        #: messages, model calls, an output an adapter saw, and what the cap left out.
        self._messages: list[Message] = []
        self._model_calls: list[ModelCall] = []
        self._captured_output: str | None = None
        self._dropped = 0
        #: Whether the output (set_output's or an adapter's) is stored as it is now.
        self._output_stored: str | None = None
        #: What was held already, to keep a message two adapters saw once (hold_message).
        self._said: dict[tuple[str, str, str | None], datetime] = {}
        self._call_ids: set[str] = set()
        #: The trace the session's grade belongs on (Langfuse scores go there): set it, or
        #: it is the OpenTelemetry or Langfuse trace active when the first call or message
        #: was recorded in this process, else the one the calls' spans name.
        self.trace_id: str | None = None
        self._seen_trace: str | None = None
        self._trace_looks = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> GradeSession:
        """Open the store and enter grade mode; returns self. Raises StoreError."""
        if self._store is None:
            self._store = self._borrowed or AuditStore(self.settings.db_path)
            # Other processes can record into this session only once its environment is set:
            # while the store's data version stays this, none has (see ``entries``).
            self._version = self._store.data_version()
        if self._saved_env is None:
            from pytest_cleo_grade.capture._refusals import refusals_size

            # Before any child can know the session: its refusals are all written after.
            self._refusals_from = refusals_size(self.settings.db_path)
            self._saved_env = {name: os.environ.get(name) for name in _ENV_NAMES}
            self.env_before = dict(self._saved_env)
            os.environ.update(self.env)
            hold_in_process(self.id, self)
        return self

    def flush(self) -> int:
        """Write the entries held in this process to the store in one transaction.

        All or none: on StoreError the entries stay held (and graded); returns how many
        were written.
        """
        # The calls first: a conversation the store refuses stays held, never the calls.
        written = self._flush_entries()
        self._flush_conversation()
        return written

    def _flush_entries(self) -> int:
        if not self._held:
            return 0
        try:
            written = self.store.append_many(self._held)
        except EntryError:
            return self._flush_each()
        self._held.clear()
        self._flushed = True
        return written

    def _flush_conversation(self) -> None:
        """Write the conversation held in this process (one transaction; kept on failure)."""
        output = self.output if self.output is not None else self._captured_output
        pending_output = output if output != self._output_stored else None
        if not (self._messages or self._model_calls or self._dropped or pending_output):
            return
        part = Conversation(
            messages=self._messages,
            model_calls=self._model_calls,
            output=pending_output,
            dropped=self._dropped,
        )
        self.store.append_conversation(self.id, part)
        self._messages, self._model_calls, self._dropped = [], [], 0
        self._output_stored = output
        self._flushed = True

    def _flush_each(self) -> int:
        """After the store refused an entry of the batch (text that is not Unicode, say):
        store every other one, one transaction each, and say which were refused. One entry
        the store cannot hold must not take the session's other calls with it."""
        held, self._held = self._held, []
        written, refused = 0, []
        for position, entry in enumerate(held):
            try:
                written += self.store.append_many([entry])
            except EntryError as exc:
                refused.append(f"{entry.domain}.{entry.operation}: {exc}")
            except StoreError:
                # What was written is stored (the session must then be read back); the
                # rest stays held for a later flush.
                self._held = held[position:]
                self._flushed = self._flushed or position > len(refused)
                raise
            else:
                self._flushed = True
        if not refused:
            return written  # refused together, stored one by one: nothing lost after all
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise EntryError(
            f"{len(refused)} of {len(held)} entries not stored (the others were): "
            f"{refused[0]}{more}"
        )

    def close(self, *, flush: bool = True) -> None:
        """Write what is held (flush(), unless ``flush=False``), restore the environment,
        close the store.

        The environment and the store are restored even when the write fails; the
        StoreError is raised afterwards.
        """
        if self._receiver is not None:
            # Spans arriving after the flush would be held and never written.
            self._receiver.stop()
            self._stopped_receiver, self._receiver = self._receiver, None
        try:
            if flush and self._store is not None:
                self.flush()
        finally:
            self._restore()

    def _restore(self) -> None:
        faults.clear(self.id)
        # Only if an adapter was loaded (a suite without capture imports nothing more).
        direct = sys.modules.get("pytest_cleo_grade.capture._direct")
        if direct is not None:
            direct.forget_expected_calls()
        hold_in_process(self.id, None)
        if self._saved_env is not None:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._saved_env = None
        if self._store is not None and self._store is not self._borrowed:
            self._store.close()
        self._store = None

    def __enter__(self) -> GradeSession:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def env(self) -> dict[str, str]:
        """CLEO's four grade-mode variables for this session (the store path absolute)."""
        return {
            ENV_GRADE: "true",
            ENV_GRADE_ID: self.id,
            ENV_SESSION_ID: self.id,
            ENV_AUDIT_DB: str(self.settings.db_path),
        }

    @property
    def otlp_endpoint(self) -> str:
        """A loopback OTLP/HTTP endpoint (``http://127.0.0.1:PORT/TOKEN``) whose tool spans
        (and Claude Code's tool events) become this session's entries; started on first use,
        stopped by :meth:`close`.

        Give it to an agent in another process as ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or use
        :meth:`subprocess_env`); spans must be exported before the test body ends. The path's
        token is the session's secret: an export without it is refused (401) and counted in
        a warning. An export the receiver refuses (malformed, too large) leaves the test
        ungradable, with the reason.
        """
        if self._receiver is None:
            from pytest_cleo_grade.capture.otlp import OtlpReceiver

            receiver = OtlpReceiver(
                self.id, self._received, refused=self.refuse, replace=self._amended
            )
            receiver.conversation_sink = self.hold_conversation
            self._receiver = receiver.start()
        return self._receiver.endpoint

    def _received(self, entries: list[AuditEntry]) -> None:
        """Take the entries the OTLP receiver made (tagged with this session already)."""
        self._held.extend(entries)

    def _amended(self, old: AuditEntry, new: AuditEntry) -> None:
        """Put ``new`` in the place of the received entry ``old`` (a tool's exception was
        logged after its span was exported)."""
        for index, held in enumerate(self._held):
            if held is old:
                self._held[index] = new
                return
        self.refuse(f"{old.domain}.{old.operation}: its failure arrived after it was stored")

    def otlp_unauthorized(self) -> dict[str, int]:
        """Exports the OTLP receiver refused for want of the session's token, by reason
        (``{"carried no token": 3}``); empty when none was, or no receiver was started."""
        receiver = self._receiver or self._stopped_receiver
        return dict(receiver.unauthorized) if receiver is not None else {}

    def subprocess_env(self, *, otlp: bool = False) -> dict[str, str]:
        """The variables a child process needs to record into this session: CLEO's four,
        the tool mapping in force, and with ``otlp=True`` (or once :attr:`otlp_endpoint` was
        used) the OTLP exporter's, pointing at this session's receiver.

        Only these: pass ``env=graded_session.subprocess_env()`` to the MCP SDK's stdio
        client (it merges them over its safe defaults); for ``subprocess`` merge them over
        ``os.environ``.
        """
        from pytest_cleo_grade.capture.mapping import subprocess_env

        if otlp:
            self.otlp_endpoint  # noqa: B018 - starts the receiver
        extra = self._receiver.env() if self._receiver is not None else None
        return subprocess_env(self, extra=extra)

    @property
    def db_path(self) -> Path:
        """The session's store (absolute), as the environment names it."""
        return self.settings.db_path.absolute()

    @property
    def store(self) -> AuditStore:
        if self._store is None:
            raise CleoGradeError(f"session {self.id} is not started")
        return self._store

    # -- recording -----------------------------------------------------------------------

    def record(
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
    ) -> AuditEntry:
        """Record one call into this session (always: a graded session records everything).

        The entry is held by the session (and graded with it) and written to the store by
        :meth:`flush` when the test is graded, so a store in trouble never reaches the code
        under test. Raises EntryError for invalid arguments.
        """
        entry = make_entry(
            self.id,
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
            refused=self.refuse,
        )
        if self._store is None:
            raise CleoGradeError(f"session {self.id} is not started")
        self._held.append(entry)
        self._note_trace()
        return entry

    def hold(self, entry: AuditEntry) -> None:
        """Take an entry :func:`~pytest_cleo_grade.capture.audit.record` made in this process."""
        self._held.append(entry)
        self._note_trace()

    def _note_trace(self) -> None:
        # Looked for while the first calls are recorded: an agent run inside a trace has one
        # by then, and a session without any does not pay for the look on every call.
        if self._seen_trace is None and self._trace_looks < _TRACE_LOOKS:
            self._trace_looks += 1
            self._seen_trace = current_trace_id()

    def graded_trace(self) -> str | None:
        """The trace this session's grade goes on: :attr:`trace_id` when set, else the trace
        active when it first recorded, else the trace most of the calls this process holds
        name (their spans', an import's: nothing is read again to know it)."""
        if self.trace_id:
            return self.trace_id
        if self._seen_trace:
            return self._seen_trace
        counts: dict[str, int] = {}
        for entry in self._held:
            named = (entry.metadata.model_extra or {}).get("traceId")
            if isinstance(named, str) and _TRACE_ID.fullmatch(named):
                counts[named] = counts.get(named, 0) + 1
        return max(counts, key=lambda key: counts[key]) if counts else None

    # -- the conversation ------------------------------------------------------------------

    def add_message(
        self,
        role: str,
        text: str,
        *,
        timestamp: datetime | None = None,
        model_call: str | None = None,
    ) -> Message:
        """Add one message of the conversation: ``role`` is ``user``, ``assistant``,
        ``system`` or ``tool`` (``human`` and ``ai`` are taken too), ``text`` what was said
        (cut at 32,000 characters), ``timestamp`` when (default: now), ``model_call`` the id
        :meth:`add_model_call` returned for the request an assistant message came from.

        The first user message is the goal the weighted judge is told; the messages reach
        it interleaved with the calls. Raises EntryError for invalid arguments.
        """
        if not isinstance(text, str):
            raise EntryError(f"add_message() takes the text, not {type(text).__name__}")
        try:
            message = Message(
                timestamp=timestamp or datetime.now(UTC),
                role=role,
                text=text,
                model_call=model_call,
            )
        except ValueError as exc:  # pydantic's ValidationError is one
            raise EntryError(f"add_message(): {_first_problem(exc)}") from None
        self._keep_message(message)  # said twice on purpose is said twice
        return message

    def add_model_call(
        self,
        model: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_tokens: int | None = None,
        duration: float | None = None,
        timestamp: datetime | None = None,
        call_id: str | None = None,
    ) -> ModelCall:
        """Add one model request with its token usage; returns it (its ``id`` is what
        :meth:`add_message`'s ``model_call`` names). Raises EntryError for invalid arguments."""
        try:
            call = ModelCall(
                id=call_id or new_call_id(),
                timestamp=timestamp or datetime.now(UTC),
                model=model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cached_tokens=cached_tokens,
                duration=duration or 0,
            )
        except ValueError as exc:
            raise EntryError(f"add_model_call(): {_first_problem(exc)}") from None
        self.hold_model_call(call)
        return call

    def hold_message(self, message: Message) -> None:
        """Take a message an adapter captured in this process (the cap applies).

        Two adapters may see one message (pydantic-ai's hooks and its spans, LangChain's
        middleware and its callbacks): the same role and text from the same model call, or
        within :data:`_SAME_MESSAGE_WINDOW` of each other, is kept once.
        """
        key = (message.role, message.text, message.model_call)
        last = self._said.get(key)
        if last is not None and (
            message.model_call is not None or abs(message.timestamp - last) <= _SAME_MESSAGE_WINDOW
        ):
            return
        self._said[key] = message.timestamp
        self._keep_message(message)

    def _keep_message(self, message: Message) -> None:
        if len(self._messages) >= MAX_ITEMS:
            self._dropped += 1
        else:
            self._messages.append(message)

    def hold_model_call(self, call: ModelCall) -> None:
        """Take a model call an adapter captured in this process (the cap applies; an id
        already held is not taken again)."""
        if call.id in self._call_ids:
            return
        self._call_ids.add(call.id)
        if len(self._model_calls) >= MAX_ITEMS:
            self._dropped += 1
        else:
            self._model_calls.append(call)

    def hold_output(self, text: str) -> None:
        """Take the final output an adapter saw (:meth:`set_output`'s text wins over it)."""
        self._captured_output = text

    def hold_conversation(self, conversation: Conversation) -> None:
        """Take a whole conversation (an ingested transcript's, an OTLP export's)."""
        self._note_trace()
        for message in conversation.messages:
            self.hold_message(message)
        for call in conversation.model_calls:
            self.hold_model_call(call)
        self._dropped += conversation.dropped
        if conversation.output is not None:
            self.hold_output(conversation.output)

    @property
    def conversation(self) -> Conversation:
        """The session's conversation: what this process holds and what other processes
        (a child, an OTLP export) stored, in time order, with the final output."""
        stored = Conversation()
        if self._flushed or (
            self._store is not None and self._store.data_version() != self._version
        ):
            stored = self.store.session_conversation(self.id)
        output = self.output if self.output is not None else self._captured_output
        held = Conversation(
            messages=self._messages,
            model_calls=self._model_calls,
            output=output,
            dropped=self._dropped,
        )
        return merge([stored, held])

    def refuse(self, reason: str) -> None:
        """Note a call that could not be recorded (the test then cannot be graded)."""
        self.refused.append(reason)

    def refusals(self) -> list[str]:
        """Every call of the session that could not be recorded: in this process
        (:attr:`refused`) or in another that recorded into its store (a child process)."""
        from pytest_cleo_grade.capture._refusals import refusals_for

        return [
            *self.refused,
            *refusals_for(self.settings.db_path, self.id, since=self._refusals_from),
        ]

    @property
    def dispatcher(self) -> AuditedDispatcher:
        """An audited dispatcher that records into this session."""
        if self._dispatcher is None:
            self._dispatcher = AuditedDispatcher(recorder=self.record, session_id=self.id)
        return self._dispatcher

    def inject(
        self,
        domain_operation: str,
        *,
        exit_code: int = 4,
        error: str | None = None,
        times: int = 1,
    ) -> Fault:
        """Make the next ``times`` calls of ``domain_operation`` fail before they run.

        Every adapter that can intercept a call (this session's dispatcher, the MCP client
        wrapper and middleware, the pydantic-ai hooks, the LangChain middleware) fails it the
        way its framework fails a tool, and records it like a real failure, marked
        ``metadata.injected``. The default is CLEO's not-found (exit code 4). FaultError for
        bad arguments.
        """
        return faults.inject(
            self.id, domain_operation, exit_code=exit_code, error=error, times=times
        )

    def ingest(
        self,
        source: str | os.PathLike[str] | Iterable[AuditEntry | Mapping[str, Any]],
        *,
        format: str = "auto",
        session_id: str | None = None,
    ) -> int:
        """Add entries from a file or an iterable, all tagged with this session.

        ``format`` (files): ``auto`` (JSON/JSONL audit entries, or a CLEO database by its
        content), ``json``/``jsonl``, ``cleo-db`` (a CLEO database or project: one session,
        ``session_id``'s, which is required when it holds several), ``otlp`` (OTLP JSON
        traces) or ``claude-code`` (a Claude Code session transcript). All or nothing: an invalid
        entry raises a CleoGradeError and nothing is added, and the test then cannot be
        graded (as for a refused :meth:`record`), even if the error was caught. Returns the
        number of entries added (held like recorded ones until :meth:`flush`).
        """
        conversation = None
        try:
            if isinstance(source, str | os.PathLike):
                entries = load_file(source, format, session_id)
                conversation = load_conversation(source, format)
            else:
                entries = coerce_entries(source)
        except CleoGradeError as exc:
            self.refuse(str(exc))
            raise
        mine = [e.model_copy(update={"session_id": self.id}) for e in entries]
        self._held.extend(mine)
        if conversation is not None:
            self.hold_conversation(conversation)
        return len(mine)

    # -- grading -------------------------------------------------------------------------

    @property
    def entries(self) -> list[AuditEntry]:
        """Every entry of this session in session order: those held in this process and
        those other processes (subprocesses, the code under test elsewhere) stored."""
        store = self.store
        if store.replaced():
            # Other processes' calls went to the file the path names now, and this session
            # cannot tell which of its calls that file is missing: no grade on part of them.
            raise StoreError(
                f"{store.path}: the audit store was deleted or replaced while the test ran, "
                "so the calls stored in it are out of reach; clear it outside graded tests"
            )
        version = store.data_version()
        if not self._flushed and version == self._version:
            # Nobody else committed to the store since the session started (the common
            # serial case): what this process holds is the whole session. Capture adapters
            # record a call with its own start time when it ends, so concurrent calls can
            # be held out of order: session order costs one linear check when they are not.
            self._read = (version, 0, len(self._held))
            return _one_per_call(order_entries(self._held))
        stored = store.session_entries(self.id)
        # One SELECT: a commit after the version was read is either in it, and counted
        # here, or after it, and then the version differs (see recorded_since_graded).
        self._read = (version, len(stored), len(self._held))
        if not self._held:
            return _one_per_call(stored)
        if not stored:
            return _one_per_call(order_entries(self._held))
        return _one_per_call(order_entries([*stored, *self._held]))

    def grade(self, *, now: datetime | None = None) -> GradeResult:
        """Grade the session's entries now with the session's grader; writes nothing."""
        self.begin_grade()
        return self.note_graded(self.grader(self, now=now))

    def begin_grade(self) -> None:
        """Say a grade begins: :meth:`note_graded` then knows what its reads returned."""
        self._read = None

    def note_graded(self, result: GradeResult) -> GradeResult:
        """Make ``result`` the session's latest grade (over the entries held until now)."""
        self.result = result
        self._graded_held = len(self._held)
        self._graded_refused = len(self.refused)
        self._graded_version = None
        store = self._store
        read, self._read = self._read, None
        if store is not None and read is not None:
            # The grade read the store: it saw what that read returned, even if another
            # process recorded more while the grade was made.
            self._graded_version, self._graded_stored, self._graded_held = read
        elif store is not None:
            try:
                self._graded_version = store.data_version()
                # Unchanged since the start and nothing flushed: nothing of it is stored.
                unwritten = not self._flushed and self._graded_version == self._version
                self._graded_stored = 0 if unwritten else store.count(self.id)
            except StoreError:
                self._graded_version = None  # then nothing can be told of later calls
        return result

    def refused_since_graded(self) -> list[str]:
        """Refusals in this process after the latest grade (an OTLP export refused while the
        test was being decided): the grade stands, but it did not know of them."""
        if self._graded_refused is None:
            return []
        return self.refused[self._graded_refused :]

    def recorded_since_graded(self) -> int:
        """Calls recorded after the latest grade, stored (by :meth:`flush`, or by another
        process straight away) but in no grade: a fixture's teardown, a child process still
        running when the test ended. Asked before the flush; 0 when the store cannot say."""
        if self._graded_held is None:
            return 0
        late = len(self._held) - self._graded_held
        store = self._store
        if store is None or self._graded_version is None:
            return late
        try:
            # The version moves only when another connection commits: the usual test pays
            # one PRAGMA here, a count only when a child (or an xdist worker) wrote.
            if store.data_version() != self._graded_version:
                late += max(0, store.count(self.id) - self._graded_stored)
        except StoreError:
            pass  # the flush that follows reports an unreadable store itself
        return late

    def persist(self, result: GradeResult) -> None:
        """Save a grade with :func:`persist`: the history (when configured), then the store.

        Raises CleoGradeError; callers in a test run turn it into a warning.
        """
        persist([result], history=self.settings.history_path, store=self.store)

    def set_output(
        self,
        text: str,
        scores: Mapping[str, Any] | None = None,
        *,
        latency_seconds: float | None = None,
        tokens: int | None = None,
        note: str | None = None,
    ) -> None:
        """Hand over the agent's output text for a comparison test (marker ``variant=``).

        ``scores`` are the six substantive scores (``{"Q-01": 4, ..., "Q-06": 3}``); without
        them the configured judge scores the output when the test ends. ``latency_seconds``,
        ``tokens`` and ``note`` become the operational metrics OP-01, OP-04 and OP-05. A
        later call replaces an earlier one.
        """
        if not isinstance(text, str):
            raise TypeError(f"set_output() takes the output text, not {type(text).__name__}")
        self.output = text
        self.scores = dict(scores) if scores is not None else None
        self.run_facts = {
            key: value
            for key, value in (
                ("latency_seconds", latency_seconds),
                ("tokens", tokens),
                ("note", note),
            )
            if value is not None
        }
