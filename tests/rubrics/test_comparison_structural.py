"""Structural checks S-01..S-06 on crafted outputs and entries, and the operational metrics."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.rubrics.comparison import (
    StructuralConfig,
    check_structure,
    measure_operational,
)
from pytest_cleo_grade.rubrics.comparison.scores import Mode
from pytest_cleo_grade.rubrics.comparison.structural import StructuralCheck, find_sections, findings
from tests.entries import entry

GOOD_OUTPUT = """\
# Context Package: login flow

## Memory
- O-7f3a2: the team chose JWT over sessions (decision D-12)

## Codebase
- `src/auth/login.py:42` handles the POST
- Token refresh lives in src/auth/tokens.py:88-97
  and is called from the middleware.

## Patterns
1. Repository pattern: src/repo/base.py:10

## Dispatched
No dispatches were needed.

## Gaps
- No tests cover logout.

## Recommendation
Extend `login.py` first.
"""
#: GOOD_OUTPUT padded into the medium band (400-2400 tokens x 4 characters): S-02 is a band,
#: so a well-formed package must also be of the thoroughness level's size.
MEDIUM_OUTPUT = GOOD_OUTPUT + "The rationale, written out at medium length.\n" * 160
#: The same in the quick band (400-600 tokens).
QUICK_OUTPUT = GOOD_OUTPUT + "The rationale, written out at quick length.\n" * 32


def make(domain: str, operation: str, at: int = 0, **kwargs: Any) -> AuditEntry:
    return AuditEntry.model_validate(entry(domain, operation, at=at, **kwargs))


MEMORY_FIRST = [make("memory", "find", 0), make("tools", "Grep", 1), make("tools", "Read", 2)]


def checks(
    output: str = GOOD_OUTPUT,
    entries: list[AuditEntry] | None = None,
    mode: Mode = "medium",
    config: StructuralConfig | None = None,
) -> dict[str, StructuralCheck]:
    result = check_structure(MEMORY_FIRST if entries is None else entries, output, mode, config)
    return {check.id: check for check in result}


def test_a_well_formed_context_package_passes_every_check() -> None:
    result = checks(MEDIUM_OUTPUT)
    assert [check.id for check in result.values()] == [f"S-0{i}" for i in range(1, 7)]
    assert {check_id: check.passed for check_id, check in result.items()} == dict.fromkeys(
        result, True
    )


@pytest.mark.parametrize(
    ("header", "section"),
    [
        pytest.param("## Memory", "Memory", id="plain"),
        pytest.param("### 1. **Memory Findings**", "Memory", id="numbered-bold-with-suffix"),
        pytest.param("# RECOMMENDATIONS", "Recommendation", id="upper-case-plural"),
        pytest.param("## Gap", "Gaps", id="singular"),
        pytest.param("## Dispatched agents ##", "Dispatched", id="closing-hashes"),
        pytest.param("##  🔍 Codebase", "Codebase", id="emoji-before-the-name"),
    ],
)
def test_section_headers_match_case_insensitively_after_numbering_and_emphasis(
    header: str, section: str
) -> None:
    assert section in find_sections(f"{header}\ntext\n")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Memory:\n- O-1a\n", id="not-a-header"),
        pytest.param("## Memorandum\n", id="different-word"),
        pytest.param("## The Memory\n", id="name-not-first"),
        pytest.param("```\n## Memory\n```\n", id="inside-a-code-fence"),
        pytest.param("~~~\n```\n## Memory\n```\n~~~\n", id="backtick-fence-inside-tildes"),
        pytest.param("````md\n```\n## Memory\n````\n", id="shorter-fence-inside-a-longer"),
        pytest.param("```\n``` not a close\n## Memory\n```\n", id="close-with-text-after"),
        pytest.param("~~~~\n~~~\n## Memory\n", id="unclosed-fence-runs-to-the-end"),
        pytest.param("#Memory\n", id="no-space-after-hashes"),
    ],
)
def test_lines_that_are_not_section_headers_are_not_sections(text: str) -> None:
    assert "Memory" not in find_sections(text)


def test_a_section_keeps_its_sub_headers_but_stops_at_the_next_section() -> None:
    sections = find_sections(
        "## Codebase\n### Auth\n- src/a.py:1\n#### Tokens\n- src/t.py:2\n"
        "### Patterns\n- P-7\n# Gaps\n- none\n"
    )
    assert sections["Codebase"] == ["### Auth", "- src/a.py:1", "#### Tokens", "- src/t.py:2"]
    assert sections["Patterns"] == ["- P-7"]
    assert sections["Gaps"] == ["- none"]


def test_a_missing_section_fails_s01_and_names_it() -> None:
    result = checks(GOOD_OUTPUT.replace("## Gaps", "Gaps:"))
    assert not result["S-01"].passed
    assert result["S-01"].evidence == ("missing sections: Gaps",)


@pytest.mark.parametrize(
    ("mode", "characters", "passed"),
    [
        pytest.param("quick", 2400, True, id="quick-exactly-600-tokens"),
        pytest.param("quick", 2401, False, id="quick-just-over-600-tokens"),
        pytest.param("medium", 9600, True, id="medium-exactly-2400-tokens"),
        pytest.param("medium", 9604, False, id="medium-2401-tokens"),
        pytest.param("thorough", 19200, True, id="thorough-exactly-4800-tokens"),
        pytest.param("thorough", 19201, False, id="thorough-just-over"),
        pytest.param("thorough", 40, False, id="a-short-thorough-output-fails-the-band"),
    ],
)
def test_output_size_is_within_budget_plus_twenty_percent(
    mode: Mode, characters: int, passed: bool
) -> None:
    output = "x" * characters
    assert checks(output, mode=mode)["S-02"].passed is passed


@pytest.mark.parametrize(
    ("characters", "passed"),
    [
        pytest.param(1599, False, id="just-under-400-tokens"),
        pytest.param(1600, True, id="exactly-400-tokens"),
        pytest.param(2400, True, id="exactly-600-tokens"),
        pytest.param(2401, False, id="over-600-tokens"),
    ],
)
def test_band_policy_also_fails_outputs_far_under_the_budget(characters: int, passed: bool) -> None:
    config = StructuralConfig(size_policy="band")
    assert checks("x" * characters, mode="quick", config=config)["S-02"].passed is passed


def test_a_finding_without_a_citation_fails_s03_with_the_offending_line() -> None:
    output = GOOD_OUTPUT.replace(
        "1. Repository pattern: src/repo/base.py:10", "1. Repository pattern everywhere"
    )
    result = checks(output)["S-03"]
    assert not result.passed
    assert result.evidence == (
        "1 of 4 findings cite no path:line or memory id",
        "Patterns: Repository pattern everywhere",
    )


@pytest.mark.parametrize(
    ("item", "passed"),
    [
        pytest.param("- see src/app.py:12", True, id="path-line"),
        pytest.param("- see app.py:12-20", True, id="path-line-range"),
        pytest.param("- recalled O-abc123", True, id="observation-id"),
        pytest.param("- recalled O-abc", True, id="observation-id-without-digits"),
        pytest.param("- decision D-42 applies", True, id="decision-id"),
        pytest.param("- imported CM-1", True, id="claude-mem-id"),
        pytest.param("- files are UTF-8 and SHA-256 hashed", False, id="encodings-are-not-ids"),
        pytest.param("- recalled memory #42", True, id="memory-hash-id"),
        pytest.param("- from obs:7f3a2", True, id="obs-colon-id"),
        pytest.param("- memory-12 says so", True, id="memory-dash-id"),
        pytest.param("- from memory: the team chose JWT", False, id="memory-colon-word"),
        pytest.param("- see memory-bank", False, id="memory-dash-word"),
        pytest.param("- obs: repository pattern", False, id="obs-colon-word"),
        pytest.param("- memory #abc", False, id="memory-hash-word"),
        pytest.param("- meeting at 10:30", False, id="a-time-is-not-a-citation"),
        pytest.param("- see src/app.py", False, id="path-without-line"),
        pytest.param("- Note:3 things", False, id="word-colon-number"),
        pytest.param("- uses A-B testing", False, id="dash-word-without-digit"),
    ],
)
def test_what_counts_as_a_citation(item: str, passed: bool) -> None:
    output = GOOD_OUTPUT.replace("1. Repository pattern: src/repo/base.py:10", item)
    assert checks(output)["S-03"].passed is passed


def test_a_citation_on_a_continuation_line_belongs_to_its_item() -> None:
    assert findings(["- Token refresh", "  in src/a.py:3", "", "- other"]) == [
        "Token refresh\nin src/a.py:3",
        "other",
    ]


def test_uncited_items_in_gaps_and_recommendation_do_not_fail_s03() -> None:
    output = GOOD_OUTPUT + "\n- uncited item at the end of the recommendation\n"
    assert checks(output)["S-03"].passed


def test_an_output_without_any_finding_fails_s03() -> None:
    output = "\n".join(
        f"## {name}\nprose only\n"
        for name in ("Memory", "Codebase", "Patterns", "Dispatched", "Gaps", "Recommendation")
    )
    result = checks(output)
    assert result["S-01"].passed
    assert not result["S-03"].passed


@pytest.mark.parametrize(
    ("entries", "passed", "evidence"),
    [
        pytest.param(
            MEMORY_FIRST, True, "first memory call is call 1, first Glob/Grep/Read call 2", id="ok"
        ),
        pytest.param(
            [make("tools", "Glob", 0), make("memory", "find", 1)],
            False,
            "tools.Glob (call 1) before the first memory call (call 2)",
            id="glob-first",
        ),
        pytest.param([make("tools", "Read", 0)], False, "no memory tool call", id="no-memory-call"),
        pytest.param(
            [make("brain", "search", 0)], True, "first memory call is call 1", id="memory-no-scan"
        ),
        pytest.param(
            [make("memory", "read", 0), make("fs", "grep", 1)],
            True,
            "first memory call is call 1, first Glob/Grep/Read call 2",
            id="memory-read-is-memory-not-a-read",
        ),
        pytest.param(
            [make("tools", "Read", 5), make("mcp", "search_memory", 1)],
            True,
            "first memory call is call 1, first Glob/Grep/Read call 2",
            id="session-order-is-by-timestamp",
        ),
    ],
)
def test_memory_tools_must_come_before_glob_grep_read(
    entries: list[AuditEntry], passed: bool, evidence: str
) -> None:
    result = checks(entries=entries)["S-04"]
    assert (result.passed, result.evidence) == (passed, (evidence,))


def test_memory_and_scan_tools_are_configurable() -> None:
    config = StructuralConfig(
        memory_domains=frozenset({"Recall"}),
        memory_markers=frozenset(),
        scan_tools=frozenset({"Search"}),
    )
    entries = [make("code", "search", 0), make("recall", "lookup", 1)]
    assert not checks(entries=entries, config=config)["S-04"].passed


@pytest.mark.parametrize(
    ("mode", "dispatches", "passed"),
    [
        pytest.param("quick", 0, True, id="quick-0"),
        pytest.param("quick", 1, False, id="quick-1"),
        pytest.param("medium", 1, True, id="medium-1"),
        pytest.param("medium", 2, False, id="medium-2"),
        pytest.param("thorough", 2, True, id="thorough-2"),
        pytest.param("thorough", 3, False, id="thorough-3"),
    ],
)
def test_dispatches_within_the_mode_limit(mode: Mode, dispatches: int, passed: bool) -> None:
    calls = [make("tools", "Task", i + 1) for i in range(dispatches)]
    assert checks(entries=MEMORY_FIRST + calls, mode=mode)["S-05"].passed is passed


def test_agent_domain_and_dispatch_operations_count_as_dispatches() -> None:
    entries = [*MEMORY_FIRST, make("agent", "explore", 3), make("orchestrate", "dispatch", 4)]
    result = checks(entries=entries, mode="thorough")["S-05"]
    assert result.evidence == ("2 dispatches; thorough limit 2",)


@pytest.mark.parametrize(
    ("extra", "passed"),
    [
        pytest.param([], True, id="read-only"),
        pytest.param([make("tasks", "add", 5, gateway="cleo_mutate")], False, id="cleo-mutate"),
        pytest.param([make("tasks", "add", 5, gateway="mutate")], False, id="mutate"),
        pytest.param([make("tools", "Write", 5)], False, id="write-tool"),
        pytest.param([make("tools", "Edit", 5, success=False)], False, id="failed-edit-attempt"),
    ],
)
def test_any_mutation_call_fails_read_only_compliance(
    extra: list[AuditEntry], passed: bool
) -> None:
    assert checks(entries=MEMORY_FIRST + extra)["S-06"].passed is passed


def test_operational_metrics_are_measured_from_the_entries() -> None:
    entries = [
        make("memory", "find", 0, params={"usage": {"input_tokens": 100, "output_tokens": 20}}),
        make("tools", "Read", 3),
        make("tools", "Grep", 12, params={"totalTokens": 30}),
    ]
    metrics = measure_operational(entries, dispatches=1, note="one useful dispatch")
    assert metrics.as_dict() == {
        "OP-01": 12.0,
        "OP-02": 3,
        "OP-03": 1,
        "OP-04": 150,
        "OP-05": "one useful dispatch",
    }


def test_tokens_are_unknown_when_no_entry_reports_them_and_explicit_values_win() -> None:
    assert measure_operational(MEMORY_FIRST, dispatches=0).tokens is None
    explicit = measure_operational(MEMORY_FIRST, dispatches=0, latency_seconds=7.5, tokens=900)
    assert (explicit.latency_seconds, explicit.tokens) == (7.5, 900)
    assert measure_operational([], dispatches=0).latency_seconds is None


#: A Context Package that is only quoted inside a code block, as an example of the format.
QUOTED_PACKAGE = (
    "## Memory\n- O-1a\n## Codebase\n- a.py:1\n## Patterns\n- b.py:2\n## Dispatched\nNone\n"
    "## Gaps\n- g\n## Recommendation\nr\n"
)


@pytest.mark.parametrize(
    "output",
    [
        pytest.param("Example:\n````markdown\n```text\n" + QUOTED_PACKAGE + "````\n", id="in-4"),
        pytest.param("~~~\n```\n" + QUOTED_PACKAGE + "```\n~~~\n", id="in-tildes"),
    ],
)
def test_a_package_quoted_inside_a_code_block_fails_s01_and_s03(output: str) -> None:
    result = checks(output)
    assert not result["S-01"].passed
    assert not result["S-03"].passed


def test_a_different_fence_inside_a_finding_does_not_end_its_code_block() -> None:
    body = ["- see the snippet", "  ~~~", "  ```", "  - a.py:1 (not an item)", "  ~~~", "- b.py:2"]
    assert findings(body) == [
        "see the snippet\n~~~\n```\n- a.py:1 (not an item)\n~~~",
        "b.py:2",
    ]


def test_a_sixty_token_thorough_report_fails_s02_as_far_under_the_budget() -> None:
    # The rubric: "thorough: ~4K tokens (20% tolerance)"; 240 characters are 60 tokens.
    result = checks("x" * 240, mode="thorough")["S-02"]
    assert not result.passed
    assert result.evidence == (
        "~60 tokens = 240 characters / 4; thorough budget 4000, allowed 3200-4800",
        "far under the thorough budget (below 3200 tokens)",
    )


def test_under_the_ceiling_policy_a_far_under_output_passes_but_is_named() -> None:
    result = checks("x" * 240, mode="thorough", config=StructuralConfig(size_policy="ceiling"))
    assert result["S-02"].passed
    assert result["S-02"].evidence[-1] == (
        "far under the thorough budget (below 3200 tokens); passes only because size_policy "
        "is 'ceiling'"
    )


def bash(command: str, at: int = 3) -> AuditEntry:
    return make("tool", "Bash", at, params={"command": command})


@pytest.mark.parametrize(
    ("command", "write"),
    [
        pytest.param("rm -rf build/", "rm", id="rm"),
        pytest.param("sed -i 's/a/b/' src/app.py", "sed -i", id="sed-i"),
        pytest.param("echo done > notes.txt", "redirection", id="redirect"),
        pytest.param("date >> log.txt", "redirection", id="append"),
        pytest.param("git commit -am wip", "git write", id="git-commit"),
        pytest.param("mv a.py b.py", "mv", id="mv"),
        pytest.param("cp a.py b.py", "cp", id="cp"),
        pytest.param("cat a | tee b", "tee", id="tee"),
        pytest.param("pip install requests", "package install", id="pip-install"),
        pytest.param("find . -name '*.pyc' -delete", "rm", id="find-delete"),
    ],
)
def test_a_shell_command_that_writes_fails_read_only_compliance(command: str, write: str) -> None:
    result = checks(entries=[*MEMORY_FIRST, bash(command)])["S-06"]
    assert not result.passed
    assert result.evidence == (f"1 mutation call: tool.Bash ({write})",)


@pytest.mark.parametrize(
    "command",
    [
        "grep -rn 'rm -rf' src 2>&1 | head",
        "cat src/app.py",
        "git log --oneline -5",
        "git diff HEAD~1",
        "ls 2>/dev/null",
        "sed -n 1,20p src/app.py",
        'echo "a > b"',
        "python -c 'print(1 > 2)'",
    ],
)
def test_a_shell_command_that_only_reads_stays_read_only(command: str) -> None:
    assert checks(entries=[*MEMORY_FIRST, bash(command)])["S-06"].passed


def test_the_shell_write_list_is_extendable() -> None:
    from pytest_cleo_grade.rubrics.comparison.structural import SHELL_WRITES

    config = StructuralConfig(shell_writes=(*SHELL_WRITES, ("deploy", r"\bmake\s+deploy\b")))
    entries = [*MEMORY_FIRST, bash("make deploy")]
    assert checks(entries=entries)["S-06"].passed
    result = checks(entries=entries, config=config)["S-06"]
    assert result.evidence == ("1 mutation call: tool.Bash (deploy)",)
    with pytest.raises(ValueError, match="shell_writes: 'bad': invalid pattern"):
        StructuralConfig(shell_writes=(("bad", "("),))
