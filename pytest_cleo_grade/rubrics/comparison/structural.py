"""Structural checks S-01..S-06: pass/fail from the output text and audit entries."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_cleo_grade.core.models import AuditEntry, order_entries
from pytest_cleo_grade.rubrics.comparison.scores import Mode

__all__ = [
    "CHECKS",
    "DISPATCH_LIMITS",
    "FINDING_SECTIONS",
    "SECTIONS",
    "SHELL_TOOLS",
    "SHELL_WRITES",
    "TOKEN_BUDGETS",
    "StructuralCheck",
    "StructuralConfig",
    "check_structure",
    "count_dispatches",
    "estimate_tokens",
    "find_sections",
    "findings",
    "section_of",
]

CheckId = Literal["S-01", "S-02", "S-03", "S-04", "S-05", "S-06"]

CHECKS: Final[tuple[tuple[CheckId, str], ...]] = (
    ("S-01", "Section completeness"),
    ("S-02", "Output size compliance"),
    ("S-03", "Evidence citations"),
    ("S-04", "Memory-first protocol"),
    ("S-05", "Dispatch limits"),
    ("S-06", "Read-only compliance"),
)

#: The six Context Package sections, in the model-comparison rubric's order.
SECTIONS: Final = ("Memory", "Codebase", "Patterns", "Dispatched", "Gaps", "Recommendation")
#: Sections whose list items are findings that must cite a source (S-03). Gaps list what was
#: NOT found and the recommendation is advice, so neither can cite; Dispatched reports on
#: dispatches (often "none").
FINDING_SECTIONS: Final = ("Memory", "Codebase", "Patterns")

#: The model-comparison rubric's budgets in tokens per mode ("~500, ~2K, ~4K").
TOKEN_BUDGETS: Final[dict[Mode, int]] = {"quick": 500, "medium": 2000, "thorough": 4000}
#: The model-comparison rubric's dispatch limits per mode.
DISPATCH_LIMITS: Final[dict[Mode, int]] = {"quick": 0, "medium": 1, "thorough": 2}

#: Tools that run a shell command (Claude Code's Bash, MCP shell servers, agent frameworks'
#: terminal tools): S-06 reads their command for writes.
SHELL_TOOLS: Final = frozenset(
    {
        "bash",
        "shell",
        "sh",
        "zsh",
        "run_shell_command",
        "execute_command",
        "run_command",
        "terminal",
    }
)
#: Params keys that hold a shell tool's command.
SHELL_COMMAND_KEYS: Final = ("command", "cmd", "script", "commands")
#: What makes a shell command a write (S-06), as (name, regular expression) pairs matched on
#: the command with its quoted strings blanked (``echo "a > b"`` writes nothing). Extend it
#: with ``StructuralConfig(shell_writes=(*SHELL_WRITES, ("deploy", r"\bdeploy\b")))``.
SHELL_WRITES: Final[tuple[tuple[str, str], ...]] = (
    ("rm", r"\b(?:rm|rmdir|unlink|shred)\b|\s-delete\b"),
    ("mv", r"\bmv\b"),
    ("cp", r"\bcp\b"),
    ("tee", r"\btee\b"),
    ("touch/mkdir", r"\b(?:touch|mkdir|ln|truncate)\b"),
    ("chmod/chown", r"\b(?:chmod|chown|chgrp)\b"),
    ("dd", r"\bdd\b[^|;&]*\bof="),
    ("sed -i", r"\bsed\b[^|;&]*\s-[A-Za-z]*i"),
    ("perl -i", r"\bperl\b[^|;&]*\s-[A-Za-z]*i"),
    # >, >> or &> to anything but /dev/null (2>&1 and >&2 only join streams)
    ("redirection", r"(?<![<>=\-])\d?>>?(?![&=>(])\s*(?!/dev/(?:null|stdout|stderr)\b)[^\s&|;]"),
    (
        "git write",
        r"\bgit\s+(?:-C\s+\S+\s+)?(?:commit|push|add|rm|mv|checkout|switch|reset|merge|"
        r"rebase|apply|am|stash|tag|cherry-pick|revert|restore|clean|init|clone|pull)\b",
    ),
    ("patch", r"\bpatch\b"),
    (
        "package install",
        r"\b(?:pip3?|npm|pnpm|yarn|uv|poetry|cargo|gem|apt(?:-get)?|brew)\s+"
        r"(?:install|uninstall|add|remove)\b",
    ),
)
_QUOTED: Final = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")


def shell_command(entry: AuditEntry) -> str | None:
    """The command text of a shell tool call (``params.command`` and the like), if any."""
    for key in SHELL_COMMAND_KEYS:
        value = entry.params.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(part, str) for part in value):
            return " ; ".join(value)
    return None


# Default memory id: CLEO BRAIN's prefixes (O- observations, D- decisions, P- patterns,
# L- learnings, CM- imported claude-mem) or MEM-/OBS-, a dash and an id (O-abc, D-42,
# O-mlr4h8wq-0); or "mem"/"memory"/"obs"/"observation" then #, : or - and an id holding a
# digit ("memory #42", "obs:7f3a"): the digit keeps words ("memory: the", "memory-bank") out.
# Upper-case prefixes only, so UTF-8, SHA-256 and p-value are not memory ids.
DEFAULT_MEMORY_ID: Final = (
    r"\b(?:O|D|P|L|CM|MEM|OBS)-[A-Za-z0-9][A-Za-z0-9-]*"
    r"|\b(?:mem|memory|obs|observation)\s?[#:-]\s?(?=[A-Za-z-]*\d)[A-Za-z0-9][A-Za-z0-9-]*"
)
# path:line (or path:line-line): the path holds a slash or a dot so that "10:30" and
# "Note:3" are not citations.
_PATH_LINE: Final = re.compile(r"[\w.\-/~]*[./][\w.\-/]*:\d+(?:-\d+)?\b")
_ATX: Final = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<text>.*?)[ \t#]*$")
# CommonMark fences: an opening run of 3+ backticks or tildes; only a run of the same
# character, at least as long and followed by nothing but spaces, closes it.
_FENCE_OPEN: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FENCE_CLOSE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_ITEM: Final = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(?P<text>\S.*)$")
_LEADING_NOISE: Final = re.compile(r"^[\W\d_]+")  # numbering, emphasis, emoji before the name
_WORD: Final = re.compile(r"[A-Za-z]+")


class StructuralCheck(BaseModel):
    """The pass/fail outcome of one structural check with what it observed."""

    model_config = ConfigDict(frozen=True)

    id: CheckId = Field(description="S-01..S-06.")
    name: str = Field(description="The model-comparison rubric's name of the check.")
    passed: bool = Field(description="Whether the requirement is met.")
    evidence: tuple[str, ...] = Field(default=(), description="What the check observed.")

    @property
    def label(self) -> str:
        return f"{self.id} {self.name}"


@dataclass(frozen=True, slots=True)
class StructuralConfig:
    """How entries are classified; every name is matched case-insensitively.

    An entry's *names* are its domain, its operation and the operation's last dotted segment
    (``fs.read`` gives ``fs.read`` and ``read``); a tool class matches when one of them is in
    its set. Memory wins over scan (a ``memory.read`` is a memory call, not a Read).
    """

    memory_domains: frozenset[str] = frozenset({"memory", "brain"})
    #: Substrings of the operation that mark a memory call (``search_memory``, ``brain.find``).
    memory_markers: frozenset[str] = frozenset({"memory", "brain"})
    scan_tools: frozenset[str] = frozenset({"glob", "grep", "read"})
    dispatch_tools: frozenset[str] = frozenset({"agent", "dispatch", "task"})
    mutation_tools: frozenset[str] = frozenset(
        {"write", "edit", "multiedit", "notebookedit", "create"}
    )
    mutation_gateways: frozenset[str] = frozenset({"cleo_mutate", "mutate"})
    #: Tools whose command S-06 reads (see SHELL_TOOLS).
    shell_tools: frozenset[str] = SHELL_TOOLS
    #: (name, pattern) pairs that make a shell command a write (see SHELL_WRITES).
    shell_writes: tuple[tuple[str, str], ...] = SHELL_WRITES
    _shell_patterns: tuple[tuple[str, re.Pattern[str]], ...] = field(
        default=(), init=False, repr=False, compare=False
    )
    token_budgets: Mapping[Mode, int] = field(default_factory=lambda: dict(TOKEN_BUDGETS))
    dispatch_limits: Mapping[Mode, int] = field(default_factory=lambda: dict(DISPATCH_LIMITS))
    #: S-02 tolerance: 20 % by the model-comparison rubric.
    size_tolerance: Fraction = Fraction(1, 5)
    #: "band" (default): budget x (1 - tolerance) to budget x (1 + tolerance), as the rubric's
    #: "~500 tokens (20 % tolerance)" reads: a budget is a size, so too short fails as too
    #: long does. "ceiling": only too long fails (a far-under output passes, said in evidence).
    size_policy: Literal["ceiling", "band"] = "band"
    memory_id_pattern: str = DEFAULT_MEMORY_ID

    def __post_init__(self) -> None:
        # Matching is case-insensitive, so a caller's {"Glob"} must match "glob".
        for name in (
            "memory_domains",
            "memory_markers",
            "scan_tools",
            "dispatch_tools",
            "mutation_tools",
            "mutation_gateways",
            "shell_tools",
        ):
            object.__setattr__(self, name, frozenset(v.lower() for v in getattr(self, name)))
        compiled = []
        for label, pattern in self.shell_writes:
            try:
                compiled.append((label, re.compile(pattern)))
            except re.error as exc:
                raise ValueError(f"shell_writes: {label!r}: invalid pattern: {exc}") from exc
        object.__setattr__(self, "_shell_patterns", tuple(compiled))

    def names(self, entry: AuditEntry) -> set[str]:
        operation = entry.operation.lower()
        return {entry.domain.lower(), operation, operation.rsplit(".", 1)[-1]}

    def is_memory(self, entry: AuditEntry) -> bool:
        operation = entry.operation.lower()
        return entry.domain.lower() in self.memory_domains or any(
            marker in operation for marker in self.memory_markers
        )

    def is_scan(self, entry: AuditEntry) -> bool:
        return not self.is_memory(entry) and bool(self.names(entry) & self.scan_tools)

    def is_dispatch(self, entry: AuditEntry) -> bool:
        return bool(self.names(entry) & self.dispatch_tools)

    def is_mutation(self, entry: AuditEntry) -> bool:
        gateway = (entry.metadata.gateway or "").lower()
        return (
            gateway in self.mutation_gateways
            or bool(self.names(entry) & self.mutation_tools)
            or self.shell_write(entry) is not None
        )

    def shell_write(self, entry: AuditEntry) -> str | None:
        """The name of the first write a shell tool call's command makes (``rm``, ``sed -i``,
        ``redirection``...), or None: not a shell call, or one that only reads."""
        if not self.names(entry) & self.shell_tools:
            return None
        command = shell_command(entry)
        if command is None:
            return None
        bare = _QUOTED.sub("''", command)
        return next(
            (label for label, pattern in self._shell_patterns if pattern.search(bare)), None
        )


def estimate_tokens(text: str) -> Fraction:
    """Budgets are in tokens; without a tokenizer, tokens are characters / 4."""
    return Fraction(len(text), 4)


def _fence(line: str, opened: str | None) -> tuple[bool, str | None]:
    """Whether ``line`` opens or closes a fenced code block, and the fence open after it.

    ``opened`` is the open block's fence (None outside one). Inside a block, a fence line of
    another character or a shorter run is only code (a ``` line quoted in a ~~~ block).
    """
    if opened is None:
        match = _FENCE_OPEN.match(line)
        return (True, match.group(1)) if match else (False, None)
    match = _FENCE_CLOSE.match(line)
    if match and match.group(1)[0] == opened[0] and len(match.group(1)) >= len(opened):
        return True, None
    return False, opened


def _headers(text: str) -> Iterator[tuple[int, int, str]]:
    """(line index, level, header text) of every ATX header outside fenced code blocks."""
    opened: str | None = None
    for index, line in enumerate(text.splitlines()):
        fence, opened_after = _fence(line, opened)
        inside, opened = opened is not None, opened_after
        if fence or inside:
            continue
        match = _ATX.match(line)
        if match:
            yield index, len(match.group(1)), match.group("text")


def section_of(header: str) -> str | None:
    """The model-comparison rubric's section a header names, if any.

    The header's first word, after numbering, emphasis and symbols ("## 2. **Codebase
    Findings**"), must be the section name, singular or plural ("Gap", "Recommendations"),
    case-insensitively.
    """
    words = _WORD.findall(_LEADING_NOISE.sub("", header))
    if not words:
        return None
    first = words[0].lower().removesuffix("s")
    for name in SECTIONS:
        if name.lower().removesuffix("s") == first:
            return name
    return None


def find_sections(text: str) -> dict[str, list[str]]:
    """The body lines under each recognised section header (the first of a repeated one).

    A section runs to the next header of the same or a higher level, or to the next section
    header of any level, so plain sub-headers (``### Auth`` under ``## Codebase``) and their
    items stay in the section.
    """
    lines = text.splitlines()
    sections: dict[str, list[str]] = {}
    headers = list(_headers(text))
    for position, (index, level, header) in enumerate(headers):
        name = section_of(header)
        if name is None or name in sections:
            continue
        end = next(
            (
                start
                for start, other, text_ in headers[position + 1 :]
                if other <= level or section_of(text_) is not None
            ),
            len(lines),
        )
        sections[name] = lines[index + 1 : end]
    return sections


def findings(body: Sequence[str]) -> list[str]:
    """List items with their continuation lines (up to a blank line or the next item)."""
    items: list[list[str]] = []
    open_item = False
    opened: str | None = None
    for line in body:
        fence, opened_after = _fence(line, opened)
        inside, opened = opened is not None, opened_after
        if fence or inside:
            if open_item:
                items[-1].append(line.strip())
            continue
        match = _ITEM.match(line)
        if match:
            items.append([match.group("text")])
            open_item = True
        elif not line.strip():
            open_item = False
        elif open_item:
            items[-1].append(line.strip())
    return ["\n".join(item) for item in items]


def _cites(item: str, memory_id: re.Pattern[str]) -> bool:
    return bool(_PATH_LINE.search(item) or memory_id.search(item))


def _short(text: str, limit: int = 60) -> str:
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def check_structure(
    entries: Sequence[AuditEntry],
    output_text: str,
    mode: Mode,
    config: StructuralConfig | None = None,
) -> tuple[StructuralCheck, ...]:
    """Run S-01..S-06 over ``entries`` (in session order) and the agent's output text."""
    cfg = config or StructuralConfig()
    names = dict(CHECKS)
    entries = order_entries(entries)

    def check(check_id: CheckId, passed: bool, *evidence: str) -> StructuralCheck:
        return StructuralCheck(id=check_id, name=names[check_id], passed=passed, evidence=evidence)

    sections = find_sections(output_text)
    missing = [name for name in SECTIONS if name not in sections]
    s01 = check(
        "S-01",
        not missing,
        f"missing sections: {', '.join(missing)}" if missing else "all 6 sections present",
    )

    tokens = estimate_tokens(output_text)
    budget = cfg.token_budgets[mode]
    upper = budget * (1 + cfg.size_tolerance)
    floor = budget * (1 - cfg.size_tolerance)
    lower = floor if cfg.size_policy == "band" else Fraction(0)
    size_ok = lower <= tokens <= upper
    allowed = f"<= {float(upper):g}" if not lower else f"{float(lower):g}-{float(upper):g}"
    size_evidence = [
        f"~{float(tokens):g} tokens = {len(output_text)} characters / 4; {mode} budget "
        f"{budget}, allowed {allowed}"
    ]
    if tokens < floor:
        # Far under the level's size: a "thorough" report of 60 tokens did not do the work.
        # Under a ceiling it passes, but the reader is still told.
        size_evidence.append(
            f"far under the {mode} budget (below {float(floor):g} tokens)"
            + ("; passes only because size_policy is 'ceiling'" if not lower else "")
        )
    elif tokens > upper:
        size_evidence.append(f"over the {mode} budget (above {float(upper):g} tokens)")
    s02 = check("S-02", size_ok, *size_evidence)

    memory_id = re.compile(cfg.memory_id_pattern)
    items = [
        (section, item)
        for section in FINDING_SECTIONS
        for item in findings(sections.get(section, []))
    ]
    uncited = [(section, item) for section, item in items if not _cites(item, memory_id)]
    if not items:
        s03 = check(
            "S-03", False, "no findings (list items) in the Memory/Codebase/Patterns sections"
        )
    elif uncited:
        s03 = check(
            "S-03",
            False,
            f"{len(uncited)} of {len(items)} findings cite no path:line or memory id",
            *(f"{section}: {_short(item)}" for section, item in uncited[:5]),
        )
    else:
        s03 = check("S-03", True, f"all {len(items)} findings cite path:line or a memory id")

    first_memory = next((i for i, e in enumerate(entries) if cfg.is_memory(e)), None)
    first_scan = next((i for i, e in enumerate(entries) if cfg.is_scan(e)), None)
    if first_memory is None:
        s04 = check("S-04", False, "no memory tool call")
    elif first_scan is not None and first_scan < first_memory:
        scan = entries[first_scan]
        s04 = check(
            "S-04",
            False,
            f"{scan.domain}.{scan.operation} (call {first_scan + 1}) before the first memory "
            f"call (call {first_memory + 1})",
        )
    else:
        s04 = check(
            "S-04",
            True,
            f"first memory call is call {first_memory + 1}"
            + (f", first Glob/Grep/Read call {first_scan + 1}" if first_scan is not None else ""),
        )

    dispatches = count_dispatches(entries, cfg)
    limit = cfg.dispatch_limits[mode]
    s05 = check(
        "S-05",
        dispatches <= limit,
        f"{dispatches} dispatch{'' if dispatches == 1 else 'es'}; {mode} limit {limit}",
    )

    mutations = [entry for entry in entries if cfg.is_mutation(entry)]

    def named(entry: AuditEntry) -> str:
        write = cfg.shell_write(entry)
        return f"{entry.domain}.{entry.operation}" + (f" ({write})" if write else "")

    s06 = check(
        "S-06",
        not mutations,
        f"{len(mutations)} mutation call{'' if len(mutations) == 1 else 's'}"
        + (": " + ", ".join(named(e) for e in mutations[:5]) if mutations else ""),
    )
    return (s01, s02, s03, s04, s05, s06)


def count_dispatches(entries: Sequence[AuditEntry], config: StructuralConfig | None = None) -> int:
    """OP-03: entries classified as agent dispatches."""
    cfg = config or StructuralConfig()
    return sum(1 for entry in entries if cfg.is_dispatch(entry))
