"""Sending grades where a team's tools already are (``--cleo-grade-export``): OpenTelemetry
events and Langfuse scores. Each module imports its framework lazily (extras ``otel`` and
``langfuse``); the core never imports this package, and an export never fails a run.
"""
