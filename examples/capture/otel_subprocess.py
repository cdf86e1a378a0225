"""An OpenTelemetry-instrumented agent in another process, graded through the session's
loopback OTLP receiver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from common import graded_session, report

AGENT = textwrap.dedent(
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads OTEL_* variables
    tracer = provider.get_tracer("agent")
    for tool, failed in [("session_list", False), ("tasks_show", True), ("session_end", False)]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
        with tracer.start_as_current_span("execute_tool " + tool, attributes=attributes) as span:
            if failed:
                span.set_attribute("error.type", "TaskNotFound")
                span.set_status(Status(StatusCode.ERROR, "task T9 not found"))
    provider.shutdown()
    """
)

with graded_session() as session:
    # In a test, the one added piece: env=graded_session.subprocess_env(otlp=True)
    env = {**os.environ, **session.subprocess_env(otlp=True)}
    subprocess.run([sys.executable, "-c", AGENT], env=env, check=True)
    report(session)
