"""How grades leave: the terminal, JUnit and Markdown renderings, the points drill-down, the
repeated runs' and baseline's texts, the HTML page, and the Langfuse and OpenTelemetry exports.

Each export imports its framework lazily (extras ``langfuse`` and ``otel``) and never fails a
run. Imports the folders below it, never pytest.
"""

from __future__ import annotations
