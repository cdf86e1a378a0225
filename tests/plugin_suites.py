"""Inner test suites for the plugin's pytester tests: agents with known grades."""

from __future__ import annotations

import textwrap

import pytest

#: A module giving inner suites agents whose CLEO grades are known exactly.
AGENTS = textwrap.dedent(
    """
    def perfect(s):
        # 100/100 A: every dimension full.
        s.record("session", "list", gateway="cleo_query")
        s.record("admin", "help", gateway="cleo_query")
        s.record("tasks", "find", {"query": "x"}, gateway="cleo_query")
        s.record("tasks", "show", {"taskId": "T1"}, gateway="cleo_query")
        s.record("session", "end", gateway="cleo_mutate")

    def seventy_five(s):
        # 75/100 B exactly: S1 10 (no session.end), S2 15, S3 20, S4 20, S5 10 (no help).
        s.record("session", "list", gateway="cleo_query")
        s.record("tasks", "show", {"taskId": "T1"}, gateway="cleo_query")

    def forty(s):
        # 40/100 F: five flags.
        s.record("tasks", "list", gateway="cleo_mutate")
    """
)

#: A deterministic agent for inner suites: the same calls at the same offsets (whole seconds
#: from now), whenever it runs; ``extra`` adds one call so two tests can differ.
REPLAY = textwrap.dedent(
    """
    import time

    def replay(session, extra=None):
        base = time.time()
        calls = [("session", "list"), ("admin", "help"), ("tasks", "find"), ("session", "end")]
        if extra:
            calls.append(("tasks", extra))
        session.ingest(
            {
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i)) + "Z",
                "domain": domain,
                "operation": operation,
                "params": {},
                "result": {"success": True, "exitCode": 0, "duration": 5},
                "metadata": {"source": "mcp", "gateway": "cleo_query"},
            }
            for i, (domain, operation) in enumerate(calls)
        )
    """
)

FORTY_FLAGS = [
    "session.list never called (check existing sessions before starting)",
    "session.end never called (always end sessions when done)",
    "tasks.list used 1x (prefer tasks.find for discovery)",
    "No admin.help or skill lookup calls (load ct-cleo for guidance)",
    "No MCP query calls (prefer cleo_query over CLI for programmatic access)",
]


def make_suite(
    pytester: pytest.Pytester, body: str, ini: str = "", warnings: str = "default"
) -> None:
    """Write the agents module, an ini file and one test module ``test_agent.py``.

    ``warnings`` is the inner run's first warning filter: in-process runs would otherwise
    inherit this project's ``filterwarnings = error``.
    """
    pytester.makepyfile(suite_agents=AGENTS)
    pytester.makeini(
        "[pytest]\naddopts = -p no:cacheprovider\n"
        f"filterwarnings =\n    {warnings}\n" + textwrap.dedent(ini)
    )
    pytester.makepyfile(
        test_agent="from suite_agents import perfect, seventy_five, forty\nimport pytest\n"
        + textwrap.dedent(body)
    )
