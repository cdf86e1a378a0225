"""OpenAI Agents SDK: tool calls recorded from the SDK's own traces (extra ``openai-agents``).

``agents.add_trace_processor(AuditTracingProcessor())`` (or ``set_trace_processors([...])``
to replace the SDK's exporter): every function span that ends becomes an entry, its name, its
input (the arguments' JSON), its output, its ``mcp_data`` (the MCP server of an MCP tool),
``span.error`` and ``started_at``/``ended_at`` for the start and the duration. It needs no
export to OpenAI: with no ``OPENAI_API_KEY`` the SDK's exporter only logs that it skipped,
and ``set_trace_processors([AuditTracingProcessor()])`` leaves no exporter at all.

A tool that raises is traced with an error (``Error running tool``) whose data holds the
exception's text only when the tool has its own ``failure_error_function`` (under the SDK's
default error function the text is redacted, and the call records exit code 1); with the text,
a ``KeyError`` or a "not found" message is CLEO's E_NOT_FOUND (4) by the shared exit-code
rules. A trace only tells what happened: this adapter cannot fail a call (use fault injection
through the dispatcher or an MCP adapter for that).

The tool of an MCP server (an agent's ``mcp_servers``) is a function span with ``mcp_data``,
but the SDK hands a result flagged ``isError`` to the model as ordinary output (its content)
and leaves the flag off the span. MCPServer, the MCP SDK's server, starts every error result
it makes "Error executing tool NAME": an MCP span whose output is one text block starting so
is a failure, its text deciding the exit code. Any other server's ``isError`` result looks
like a success on the span (docs/capture.md says so).

A call the SDK stops before its tool runs is left out when its span says so: the SDK's
"manually rejected by user" error (an approval decision it already held) or a tool input
guardrail's tripwire. A call paused for approval (its span ends with no output) and a call a
tool input guardrail rejects with ``reject_content`` (its output is the rejection message)
leave nothing on their spans that tells them from a call that ran: they are recorded as
successes (a known limit, in docs/capture.md).

The SDK's processors are process-wide, so one added per test stays for the next: every span
is recorded once however many AuditTracingProcessors are registered (by the first one the SDK
hands it to, with that processor's mapping and source).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

try:
    from agents.tracing import (
        FunctionSpanData,
        GenerationSpanData,
        ResponseSpanData,
        TracingProcessor,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra(
        "pytest_cleo_grade.capture.openai_agents", "the OpenAI Agents SDK", "openai-agents", exc
    ) from exc

from pytest_cleo_grade.capture._direct import SpanClaims
from pytest_cleo_grade.capture.mapping import (
    Call,
    Failure,
    StartedIn,
    ToolMapping,
    envelope_failure,
    record_call,
    record_call_started_in,
    session_at_start,
    texts_envelope_failure,
)
from pytest_cleo_grade.core._links import docs_page

__all__ = [
    "MCP_ERROR_PREFIX",
    "AuditTracingProcessor",
    "mcp_output_failure",
    "span_failure",
    "stopped_before_running",
]

SOURCE = "openai-agents"

#: How many recorded spans are remembered. The SDK hands an ended span to every processor, one
#: after the other, at once (``SynchronousMultiTracingProcessor``): a span's repeats come before
#: thousands of other spans can end, so forgetting the oldest loses nothing.
RECORDED_SPANS_KEPT: Final = 4096

# The spans recorded by any AuditTracingProcessor in this process, oldest first, by (trace id,
# span id). A record shared by all instances rather than "only the first registered instance
# records": it needs nothing from the SDK's private processor list, and it still holds when
# that list is replaced (``set_trace_processors``), an instance is registered twice, or the
# instance that would have been first is gone.
_claims = SpanClaims(RECORDED_SPANS_KEPT)


def _first_to_record(span: Any) -> bool:
    """Claim ``span`` for recording: True for the first processor to ask, False after."""
    return _claims.first((str(span.trace_id), str(span.span_id)))


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


#: How MCPServer (the MCP SDK's server) starts the text of every ``isError`` result it makes of
#: a failing tool: "Error executing tool NAME: <the ToolError's text>", or only "Error executing
#: tool NAME" for a crash. The Agents SDK leaves the flag itself off the span.
MCP_ERROR_PREFIX: Final = "Error executing tool "

# The SDK's span error (its data's "error") on a call it stopped before the tool ran
# (agents/run_internal/tool_execution.py): rejected by an approval decision it already held
# (`_maybe_execute_tool_approval`), or a tool input guardrail's tripwire (its exception's text,
# written there only when the trace includes sensitive data).
_STOPPED_BEFORE_RUNNING: Final = re.compile(
    r"Tool execution for \S* ?was manually rejected by user\."
    r"|Tool input guardrail \w+ triggered tripwire"
)


def stopped_before_running(error: Mapping[str, Any] | None) -> bool:
    """Whether a function span's error says the SDK stopped the call before its tool ran: no
    call to grade (as other adapters leave out a call denied before it runs)."""
    data = error.get("data") if error else None
    detail = data.get("error") if isinstance(data, Mapping) else None
    return isinstance(detail, str) and _STOPPED_BEFORE_RUNNING.fullmatch(detail) is not None


def mcp_output_failure(tool: str, output: Any) -> Failure | None:
    """How an MCP tool's output on its span says the call failed: one text block (the SDK's
    shape for a result of one content block) that is MCPServer's error text, or CLEO's error
    envelope as a text block's JSON; else None (a result that only mentions "not found" is a
    success: the words alone are no error flag)."""
    blocks = output if isinstance(output, list) else [output]
    texts = [
        block["text"]
        for block in blocks
        if isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    if isinstance(output, Mapping) and texts and texts[0].startswith(MCP_ERROR_PREFIX):
        return Failure(tool=tool, payload=[dict(output)], message=texts[0])
    return texts_envelope_failure(tool, texts)


def span_failure(
    tool: str, error: Mapping[str, Any] | None, output: Any, *, mcp: bool = False
) -> Failure | None:
    """How a function span says its tool failed: ``span.error`` (its data's ``error`` text is
    the tool's), CLEO's error envelope as the output, or (``mcp``: the span has ``mcp_data``)
    an MCP error result as the output (:func:`mcp_output_failure`); else None."""
    if error:
        data = error.get("data")
        detail = data.get("error") if isinstance(data, Mapping) else None
        message = str(error.get("message") or "tool failed")
        text = f"{message}: {detail}" if isinstance(detail, str) and detail else message
        # What the tool's failure_error_function told the model: the exception's text alone
        # ("'T9'" for a KeyError) may not say what failed, the reply may ("KeyError: 'T9'").
        if isinstance(output, str) and output and output not in text:
            text = f"{text} ({output[:500]})"
        return Failure(tool=tool, payload=dict(error), message=text)
    if mcp:
        found = mcp_output_failure(tool, output)
        if found is not None:
            return found
    if isinstance(output, str | Mapping):
        return envelope_failure(tool, output if isinstance(output, str) else dict(output))
    return None


#: What the SDK writes on a failing tool's span instead of the error's text: under its default
#: error function, and for every tool when the trace leaves out sensitive data.
REDACTED_ERROR: Final = "Error details are redacted."
_NOT_FOUND_UNSEEN: Final = "a failure as exit 1 even if it was a not-found"


def _unseen(data: FunctionSpanData, error: Mapping[str, Any] | None) -> str | None:
    """What a function span cannot show of its call, for the warning: the SDK writes a tool's
    arguments and output on its span only when the trace includes sensitive data, and redacts
    a failing tool's error text then, or under its default error function."""
    if data.input is None and data.output is None:
        return (
            "its span carries neither its arguments nor its output, so it is graded with no "
            f"parameters, and {_NOT_FOUND_UNSEEN} (the run's trace leaves out sensitive "
            "data: RunConfig(trace_include_sensitive_data=False) or "
            "OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA=false; "
            f"{docs_page('capture.md', 'openai-agents-sdk')})"
        )
    data_of_error = error.get("data") if error else None
    detail = data_of_error.get("error") if isinstance(data_of_error, Mapping) else None
    if isinstance(detail, str) and REDACTED_ERROR in detail:
        return (
            f"the SDK redacted its error's text on its span, so it is graded as "
            f"{_NOT_FOUND_UNSEEN} (give the tool a failure_error_function that names the "
            f"error: {docs_page('capture.md', 'openai-agents-sdk')})"
        )
    if data.input is None:
        return "its span carries no arguments, so it is graded with no parameters"
    return None


class AuditTracingProcessor(TracingProcessor):
    """Records every ended function span into the graded session active in this process.

    Each span once, however many instances are registered (see the module's docstring).
    """

    def __init__(self, *, mapping: ToolMapping | None = None, source: str = SOURCE) -> None:
        self.mapping = mapping
        self.source = source
        self._started_in: OrderedDict[tuple[str, str], StartedIn] = OrderedDict()
        self._lock = threading.Lock()
        #: (role, text) of the messages already recorded: each request repeats the history.
        self._said: set[tuple[str, str]] = set()

    def on_trace_start(self, trace: Any) -> None:
        return None

    def on_trace_end(self, trace: Any) -> None:
        return None

    def on_span_start(self, span: Any) -> None:
        if isinstance(span.span_data, FunctionSpanData):
            # The session the call starts in: one a test left running (in a thread) that
            # ends during the next test is still the first test's call.
            with self._lock:
                self._started_in[(str(span.trace_id), str(span.span_id))] = session_at_start()
                if len(self._started_in) > RECORDED_SPANS_KEPT:
                    self._started_in.popitem(last=False)  # spans that never ended

    def on_span_end(self, span: Any) -> None:
        data = span.span_data
        if isinstance(data, GenerationSpanData | ResponseSpanData):
            if _first_to_record(span):
                _record_model_span(span, self._said)
            return
        if not isinstance(data, FunctionSpanData):
            return
        key = (str(span.trace_id), str(span.span_id))
        with self._lock:
            known = key in self._started_in
            started_in = self._started_in.pop(key, None)
        if stopped_before_running(span.error) or not _first_to_record(span):
            return
        started, ended = _time(span.started_at), _time(span.ended_at)
        duration = (ended - started).total_seconds() * 1000 if started and ended else None
        extra: dict[str, Any] = {"spanId": span.span_id}
        mcp_data = data.mcp_data
        if isinstance(mcp_data, Mapping):
            extra["mcp"] = dict(mcp_data)
        call = Call(
            tool=data.name,
            arguments=data.input,
            failure=span_failure(
                data.name, span.error, data.output, mcp=isinstance(mcp_data, Mapping)
            ),
            started=started,
            duration_ms=duration,
            source=self.source,
            extra=extra,
            unseen=_unseen(data, span.error),
            result=data.output,
        )
        if not known:
            # Started before this processor was registered: where it started is not known.
            record_call(call, mapping=self.mapping)
        else:
            record_call_started_in(call, started_in, mapping=self.mapping)

    def shutdown(self) -> None:
        return None

    def force_flush(self) -> None:
        return None


# -- the conversation: generation spans (chat completions models) and response spans
# (Responses API models), with their input when the trace includes sensitive data.


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def _items_text(items: Any) -> list[tuple[str, str]]:
    """(role, text) of chat messages or Responses input/output items."""
    from pytest_cleo_grade.capture._conversation import text_of

    if isinstance(items, str):
        return [("user", items)]
    if not isinstance(items, list | tuple):
        return []
    found: list[tuple[str, str]] = []
    for item in items:
        role = _get(item, "role")
        kind = _get(item, "type")
        if not isinstance(role, str) or kind not in (None, "message"):
            continue
        content = _get(item, "content")
        if isinstance(content, list | tuple):
            content = [
                {"type": _get(part, "type") or "text", "text": _get(part, "text")}
                for part in content
            ]
        text = text_of(content)
        if text:
            found.append((role, text))
    return found


def _record_model_span(span: Any, said: set[tuple[str, str]]) -> None:
    from pytest_cleo_grade.capture._conversation import message, model_call, record_conversation

    data = span.span_data
    started, ended = _time(span.started_at), _time(span.ended_at)
    if isinstance(data, GenerationSpanData):
        inputs, outputs = _items_text(data.input), _items_text(data.output)
        usage = data.usage if isinstance(data.usage, Mapping) else {}
        model = data.model
        tokens_in = usage.get("input_tokens", usage.get("prompt_tokens"))
        tokens_out = usage.get("output_tokens", usage.get("completion_tokens"))
        cached = None
    else:
        response = data.response
        inputs = _items_text(data.input)
        outputs = _items_text(_get(response, "output")) if response is not None else []
        reported = _get(response, "usage") if response is not None else None
        model = _get(response, "model") if response is not None else None
        tokens_in, tokens_out = _get(reported, "input_tokens"), _get(reported, "output_tokens")
        cached = _get(_get(reported, "input_tokens_details"), "cached_tokens")
    duration = (ended - started).total_seconds() * 1000 if started and ended else None
    call = model_call(
        model if isinstance(model, str) else None,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cached_tokens=cached,
        timestamp=started,
        duration=duration,
        call_id=str(span.span_id),
    )
    messages = []
    for role, text in inputs:
        if (role, text) not in said:
            said.add((role, text))
            messages.append(message(role, text, timestamp=started))
    for role, text in outputs:
        said.add((role, text))
        messages.append(
            message(role, text, timestamp=ended, model_call=call.id if call is not None else None)
        )
    record_conversation(messages, [call])
