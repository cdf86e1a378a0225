"""The rule rubric (``rules``): a protocol written in a TOML rule file, graded without Python.

Each dimension starts at its ``start`` score; its rules, in file order, add awards or
deductions, evidence and flags; the score is then clamped to 0..max. Every rule also adds
its ``points`` items (rule id, sentence, entry indices), so a dimension's items sum to its
score. Without a file the rubric grades with CLEO's rubric written as rules
(``rubrics/cleo.toml``), which matches the built-in ``cleo`` rubric on every case.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.models import (
    AuditEntry,
    DimensionScore,
    GradeResult,
    coerce_entries,
    order_entries,
)
from pytest_cleo_grade.rubrics._cleo_calls import JS_WHITESPACE
from pytest_cleo_grade.rubrics._document import parse_document, read_document, validate_document
from pytest_cleo_grade.rubrics._identity import settings_hash
from pytest_cleo_grade.rubrics._points import balance, per_violation, point
from pytest_cleo_grade.rubrics._rule_spec import (
    AtMost,
    Before,
    Budget,
    Called,
    CallPattern,
    Dimension,
    Duplicates,
    Forbidden,
    Penalty,
    Price,
    Ratio,
    Recovery,
    RuleSpec,
)
from pytest_cleo_grade.rubrics._session_metrics import session_cost, session_metrics
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig
from pytest_cleo_grade.rubrics.weighted.spec import validate_spec

__all__ = [
    "CLEO_RULES",
    "RULES_RUBRIC",
    "RulesRubric",
    "check_rubric_file",
    "grade_rules",
    "is_rule_document",
    "load_rule_file",
]

RULES_RUBRIC: Final = "rules"
#: CLEO's rubric as a rule file, shipped in the package.
CLEO_RULES: Final = "cleo.toml"

_Match = Callable[[AuditEntry], bool]
_Points = list[dict[str, Any]]


def is_rule_document(data: object) -> bool:
    """Whether a parsed rubric file is a rule file: its dimensions hold ``rules``, or look
    like a rule file's (a ``max``, and neither a weighted dimension's ``type`` nor
    ``weight``), so a rule file that forgot its rules is told so in a rule file's words."""
    dimensions = data.get("dimensions") if isinstance(data, dict) else None
    if not isinstance(dimensions, list):
        return False
    tables = [d for d in dimensions if isinstance(d, dict)]
    if any("rules" in d for d in tables):
        return True
    weighted = any("type" in d or "weight" in d for d in tables)
    return not weighted and any("max" in d for d in tables)


def check_rubric_file(path: str | Path) -> None:
    """Validate a rubric file of either kind (rules or weighted); RubricError if it is bad."""
    data, _ = read_document(path)
    if is_rule_document(data):
        validate_document(RuleSpec, data, str(path))
    else:
        validate_spec(data, str(path))


def load_rule_file(path: str | Path) -> RuleSpec:
    """Read and validate a rule file; RubricError names the file and the first bad field.

    The rubric is configured for every graded test: the file is read and validated once per
    version of it (its size and modification time), not once per test.
    """
    try:
        stat = os.stat(path)
    except OSError:
        return _load_rule_file(str(path), None)  # read_document reports it in one line
    return _load_rule_file(str(path), (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=32)
def _load_rule_file(path: str, version: tuple[int, int] | None) -> RuleSpec:
    data, _ = read_document(path)
    kind = _other_kind(data)
    if kind is not None:
        # Its own fields' errors ("dimensions: Field required") would not say what it is.
        raise RubricError(
            f"{path}: {kind}, not a rule file: the rules rubric reads rule files; name the "
            "rubric it is for (--rubric trajectory or weighted)"
        )
    return validate_document(RuleSpec, data, path)


def _other_kind(data: object) -> str | None:
    """What another rubric's file is ("a trajectory file"), or None (a rule file, or a file
    that is none: its own errors say what is wrong with it)."""
    if is_rule_document(data) or not isinstance(data, dict):
        return None
    if "trajectory" in data:
        return "a trajectory file"
    if "judge" in data or (isinstance(data.get("dimensions"), list) and data["dimensions"]):
        return "a weighted rubric file"
    return None


def _spec_hash(spec: RuleSpec) -> str:
    return settings_hash(spec.model_dump(mode="json"))


@functools.cache
def cleo_rules() -> RuleSpec:
    """CLEO's rubric written as rules (the file shipped as ``rubrics/cleo.toml``)."""
    text = resources.files(__package__ or "pytest_cleo_grade.rubrics").joinpath(CLEO_RULES)
    where = f"pytest_cleo_grade/rubrics/{CLEO_RULES}"
    data = parse_document(text.read_text("utf-8"), suffix=".toml", where=where)
    return validate_document(RuleSpec, data, where)


def _blank(value: object) -> bool:
    """CLEO's ``!value || !value.trim()``: missing, blank or another falsy value."""
    return not value.strip(JS_WHITESPACE) if isinstance(value, str) else not value


def _compile(pattern: CallPattern) -> _Match:
    """One predicate for a pattern; conditions not given are not checked."""
    checks: list[_Match] = []
    if pattern.calls:
        names = frozenset(tuple(call.split(".", 1)) for call in pattern.calls)
        checks.append(lambda e: (e.domain, e.operation) in names)
    if pattern.domains:
        domains = frozenset(pattern.domains)
        checks.append(lambda e: e.domain in domains)
    if pattern.gateways:
        gateways = frozenset(pattern.gateways)
        checks.append(lambda e: e.metadata.gateway in gateways)
    if pattern.success is not None:
        success = pattern.success
        checks.append(lambda e: e.result.success is success)
    if pattern.exit_code is not None:
        code = pattern.exit_code
        checks.append(lambda e: e.result.exit_code == code)
    for name in pattern.params_blank:
        checks.append(lambda e, name=name: _blank(e.params.get(name)))  # type: ignore[misc]
    for name in pattern.params_set:
        checks.append(lambda e, name=name: not _blank(e.params.get(name)))  # type: ignore[misc]
    for name in pattern.params_truthy:
        checks.append(lambda e, name=name: bool(e.params.get(name)))  # type: ignore[misc]
    return lambda e: all(check(e) for check in checks)


def _where(entries: Sequence[AuditEntry], pattern: CallPattern) -> list[int]:
    match = _compile(pattern)
    return [i for i, entry in enumerate(entries) if match(entry)]


def _about(entry: AuditEntry) -> dict[str, Any]:
    """The placeholders an entry fills in a sentence (agent-controlled, inserted as text)."""
    task_id = entry.metadata.task_id
    return {
        "domain": entry.domain,
        "operation": entry.operation,
        "taskId": "unknown" if task_id is None else task_id,
    }


@dataclass(slots=True)
class _Dimension:
    """One dimension being scored: its score, evidence (with sort keys), flags and points."""

    spec: Dimension
    flags: list[str]
    points: _Points
    score: int = 0
    evidence: list[tuple[int, str]] = field(default_factory=list)
    clean: bool = True

    def award(self, rule: Any, earned: int, text: str, where: Iterable[int] = ()) -> None:
        self.score += earned
        self.points.append(point(self.spec.name, earned, rule.id, text, where))

    def note(self, rule: Any, text: str | None) -> None:
        if text is not None:
            self.evidence.append((rule.evidence_order, text))

    def flag(self, text: str | None) -> None:
        if text is not None:
            self.flags.append(text)


def _say(template: str | None, **values: Any) -> str | None:
    return None if template is None else template.format_map(values)


def _called(entries: Sequence[AuditEntry], rule: Called, dim: _Dimension) -> None:
    found = _where(entries, rule.match)
    if len(found) >= rule.min:
        text = _say(rule.evidence, count=len(found))
        dim.note(rule, text)
        dim.award(rule, rule.points, text or f"Called {len(found)}x", found)
    else:
        text = _say(rule.flag, count=len(found))
        dim.flag(text)
        dim.award(rule, 0, text or f"Called {len(found)}x, fewer than {rule.min}", found)


def _before(entries: Sequence[AuditEntry], rule: Before, dim: _Dimension) -> None:
    first = next(iter(_where(entries, rule.first)), None)
    then = next(iter(_where(entries, rule.then)), None)
    where = [i for i in (first, then) if i is not None]
    if first is None:
        text = _say(rule.flag_missing)
        dim.flag(text)
        dim.award(rule, 0, text or "Never called", where)
    elif then is None or entries[first].timestamp <= entries[then].timestamp:
        text = _say(rule.evidence)
        dim.note(rule, text)
        dim.award(rule, rule.points, text or "Called first", where)
    else:
        text = _say(rule.flag)
        dim.flag(text)
        dim.award(rule, 0, text or "Called after the call it should precede", where)


def _half_up(value: Fraction) -> int:
    return int((value + Fraction(1, 2)).__floor__())


def _ratio(entries: Sequence[AuditEntry], rule: Ratio, dim: _Dimension) -> None:
    found = _where(entries, rule.match)
    other = _where(entries, rule.other)
    total = len(found) + len(other)
    threshold = _half_up(100 * Fraction(repr(rule.threshold)))
    if total == 0:
        # Every placeholder a ratio's texts may hold (checked at load), for no calls.
        text = _say(
            rule.none_evidence,
            count=0,
            other=0,
            total=0,
            percent=0,
            earned=rule.none_points,
            threshold=threshold,
        )
        dim.note(rule, text)
        dim.award(rule, rule.none_points, text or "Neither was called")
        return
    ratio = Fraction(len(found), total)
    values = {
        "count": len(found),
        "other": len(other),
        "total": total,
        "percent": _half_up(100 * ratio),
        "threshold": threshold,
    }
    if ratio >= Fraction(repr(rule.threshold)):
        text = _say(rule.evidence, earned=rule.points, **values)
        dim.note(rule, text)
        dim.award(rule, rule.points, text or f"Ratio {values['percent']}%", found)
    else:
        earned = _half_up(rule.points * ratio)
        text = _say(rule.flag, earned=earned, **values)
        dim.flag(text)
        dim.award(rule, earned, text or f"Ratio {values['percent']}%: {earned} points", other)


def _penalise(
    dim: _Dimension,
    rule: Penalty | Forbidden,
    entries: Sequence[AuditEntry],
    violations: list[int],
    quiet: dict[str, Any] | None,
) -> None:
    """Deduct per violation (or once) with a flag each; with none, the evidence (filled
    with ``quiet``, if there is anything to say)."""
    if not violations:
        if quiet is not None:
            dim.note(rule, _say(rule.evidence, **quiet))
        return
    dim.clean = False
    if rule.once:
        text = _say(rule.flag, count=len(violations), **_about(entries[violations[0]]))
        dim.flag(text)
        dim.award(rule, rule.points, text or f"{len(violations)} violation(s)", violations)
        return
    texts: list[tuple[str, Iterable[int]]] = []
    for index in violations:
        text = _say(rule.flag, count=len(violations), **_about(entries[index]))
        dim.flag(text)
        texts.append((text or f"{entries[index].domain}.{entries[index].operation}", (index,)))
    items = per_violation(dim.spec.name, rule.points, rule.id, texts)
    dim.points.extend(items)
    dim.score += sum(item["points"] for item in items)


def _penalty(entries: Sequence[AuditEntry], rule: Penalty, dim: _Dimension) -> None:
    subjects = _where(entries, rule.match)
    violates = _compile(rule.violates) if rule.violates is not None else None
    earlier = (
        next(iter(_where(entries, rule.unless_preceded_by)), None)
        if rule.unless_preceded_by is not None
        else None
    )
    violations = [
        index
        for index in subjects
        if (violates is not None and violates(entries[index]))
        # "Earlier": a call that matches both is not its own precedent.
        or (rule.unless_preceded_by is not None and (earlier is None or earlier >= index))
    ]
    quiet = {"count": len(subjects), **_about(entries[subjects[0]])} if subjects else None
    _penalise(dim, rule, entries, violations, quiet)


def _forbidden(entries: Sequence[AuditEntry], rule: Forbidden, dim: _Dimension) -> None:
    found = _where(entries, rule.match)
    _penalise(dim, rule, entries, found, {"count": 0})


def _recovery(entries: Sequence[AuditEntry], rule: Recovery, dim: _Dimension) -> None:
    recover = _compile(rule.recover)
    unrecovered: list[tuple[str, Iterable[int]]] = []
    recovered: list[tuple[str, Iterable[int]]] = []
    for index in _where(entries, rule.failure):
        dim.clean = False
        window = entries[index + 1 : index + 1 + rule.within]
        values = {**_about(entries[index]), "within": rule.within}
        found = next((k for k, e in enumerate(window) if recover(e)), None)
        if found is not None:
            text = _say(rule.evidence, **values)
            dim.note(rule, text)
            recovered.append(
                (text or "A failure followed by a recovery call", (index, index + 1 + found))
            )
        else:
            text = _say(rule.flag, **values)
            dim.flag(text)
            unrecovered.append((text or "A failure with no recovery call after it", (index,)))
    dim.points.extend(per_violation(dim.spec.name, 0, rule.id, recovered))
    items = per_violation(dim.spec.name, rule.points, rule.id, unrecovered)
    dim.points.extend(items)
    dim.score += sum(item["points"] for item in items)


def _duplicates(entries: Sequence[AuditEntry], rule: Duplicates, dim: _Dimension) -> None:
    seen: set[str] = set()
    repeated: list[int] = []
    for index in _where(entries, rule.match):
        value = entries[index].params.get(rule.param)
        if value is None:
            continue
        key = (value if isinstance(value, str) else str(value)).strip(JS_WHITESPACE).lower()
        if not key:
            continue  # a blank value is no value: it repeats nothing
        if key in seen:
            repeated.append(index)
        seen.add(key)
    if repeated:
        dim.clean = False
        text = _say(rule.flag, count=len(repeated))
        dim.flag(text)
        dim.award(rule, rule.points, text or f"{len(repeated)} repeated value(s)", repeated)
    else:
        dim.note(rule, _say(rule.evidence, count=0))


def _at_most(entries: Sequence[AuditEntry], rule: AtMost, dim: _Dimension) -> None:
    found = _where(entries, rule.match)
    if len(found) > rule.max:
        dim.clean = False
        text = _say(rule.flag, count=len(found), max=rule.max)
        dim.flag(text)
        extra = found[rule.max :]
        dim.award(rule, rule.points, text or f"Called {len(found)}x, more than {rule.max}", extra)
    else:
        dim.note(rule, _say(rule.evidence, count=len(found), max=rule.max))


def _budget(entries: Sequence[AuditEntry], rule: Budget, dim: _Dimension, facts: _Facts) -> None:
    metrics = session_metrics(entries, facts.conversation)
    used: dict[str, float | None] = {
        "tokens": metrics.tokens,
        "calls": metrics.tool_calls,
        "model calls": metrics.model_calls,
        "seconds": metrics.latency_seconds,
    }
    if "cost" in rule.limits():
        prices = {name: (p.input, p.output) for name, p in facts.prices.items()}
        cost, unpriced = session_cost(facts.conversation, prices)
        if unpriced:
            raise RubricError(
                f"budget rule {rule.id!r}: no price for model {unpriced[0]!r} in [prices]"
            )
        used["cost"] = cost
    over: list[str] = []
    within: list[str] = []
    for unit, limit in rule.limits().items():
        value = used[unit]
        if value is None:
            raise RubricError(
                f"budget rule {rule.id!r}: the session reported no {unit} to hold to "
                f"{_number(limit)} (capture the conversation: docs/capture.md)"
            )
        values = {"used": _number(value), "limit": _number(limit), "unit": unit}
        if value > limit:
            over.append(
                _say(rule.flag, **values) or f"{values['used']} {unit}, over {values['limit']}"
            )
        else:
            within.append(_say(rule.evidence, **values) or "")
    if over:
        dim.clean = False
        for text in over:
            dim.flag(text if rule.flag is not None else None)
        dim.award(rule, rule.points, "; ".join(over))
    else:
        for text in within:
            dim.note(rule, text or None)


def _number(value: float) -> str:
    """A figure as a sentence shows it: whole numbers without a point, else 4 significant
    digits (a cost of 0.0123)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


@dataclass(frozen=True, slots=True)
class _Facts:
    """What budget rules read besides the calls: the conversation, the price table."""

    conversation: Conversation | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)


_KINDS: Final[Mapping[type, Callable[[Sequence[AuditEntry], Any, _Dimension], None]]] = {
    Called: _called,
    Before: _before,
    Ratio: _ratio,
    Penalty: _penalty,
    Recovery: _recovery,
    Duplicates: _duplicates,
    Forbidden: _forbidden,
    AtMost: _at_most,
}


def _score(
    entries: Sequence[AuditEntry], spec: Dimension, flags: list[str], facts: _Facts | None = None
) -> tuple[DimensionScore, _Points]:
    dim = _Dimension(spec, flags, [], score=spec.start)
    if spec.start:
        dim.points.append(
            point(
                spec.name, spec.start, f"{spec.name}.start", f"{spec.name} starts at {spec.start}"
            )
        )
    for rule in spec.rules:
        if isinstance(rule, Budget):
            _budget(entries, rule, dim, facts or _Facts())
        else:
            _KINDS[type(rule)](entries, rule, dim)
    if dim.clean and spec.evidence_if_clean is not None:
        # Checked to hold no placeholder: {{ and }} are its literal braces, as in any sentence.
        clean = spec.evidence_if_clean.format()
        dim.evidence.append((max((k for k, _ in dim.evidence), default=0), clean))
    score = min(max(dim.score, 0), spec.max)
    balance(dim.points, spec.name, score, f"{spec.name}.limit")
    evidence = [text for _, text in sorted(dim.evidence, key=lambda item: item[0])]
    return DimensionScore(score=score, max=spec.max, evidence=evidence), dim.points


def grade_rules(
    spec: RuleSpec,
    entries: Iterable[AuditEntry | Mapping[str, Any]],
    *,
    session_id: str,
    now: datetime | None = None,
    task_id: str | None = None,
    conversation: Conversation | None = None,
) -> GradeResult:
    """Grade ``session_id``'s entries (in session order) with the rules of ``spec``;
    ``conversation`` (its model calls' tokens, its messages' times) is what budget rules
    read besides the calls."""
    validated = coerce_entries(entries)
    mine = order_entries([e for e in validated if e.session_id in (None, session_id)])
    timestamp = now or datetime.now(UTC)
    if not mine:
        empty = {d.name: DimensionScore(score=0, max=d.max, evidence=[]) for d in spec.dimensions}
        return GradeResult(
            session_id=session_id,
            task_id=task_id,
            total_score=0,
            max_score=sum(d.max for d in spec.dimensions),
            dimensions=empty,
            flags=[spec.empty_flag.format()],
            timestamp=timestamp,
            entry_count=0,
            points=[],  # nothing to explain: every grade carries the list
        )
    flags: list[str] = []
    points: _Points = []
    dimensions: dict[str, DimensionScore] = {}
    facts = _Facts(conversation, spec.prices)
    for dimension in spec.dimensions:
        dimensions[dimension.name], items = _score(mine, dimension, flags, facts)
        points.extend(items)
    return GradeResult(
        session_id=session_id,
        task_id=task_id,
        total_score=sum(int(d.score) for d in dimensions.values()),
        max_score=sum(d.max for d in spec.dimensions),
        dimensions=dimensions,
        flags=flags,
        timestamp=timestamp,
        entry_count=len(mine),
        points=points,
    )


class RulesRubric:
    """The rule rubric: a rule file (``--cleo-grade-rubric-file``), CLEO's rules by default."""

    name: Final = RULES_RUBRIC

    def __init__(self, spec: RuleSpec | None = None) -> None:
        self.spec = spec or cleo_rules()

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def settings_hash(self) -> str:
        """The rule file's hash (``rubricHash``): an edited file differs at the same version."""
        return _spec_hash(self.spec)

    @property
    def dimensions(self) -> Mapping[str, float]:
        return {d.name: float(d.max) for d in self.spec.dimensions}

    def configure(self, config: RubricConfig) -> RulesRubric:
        """A copy grading with ``config.rubric_file`` (when given)."""
        if config.rubric_file is None:
            return self
        return RulesRubric(load_rule_file(config.rubric_file))

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Grade with the rule file's rules; ``taskId`` from the context."""
        task_id = context.task_id if context is not None else None
        conversation = context.conversation if context is not None else None
        return grade_rules(
            self.spec,
            entries,
            session_id=session_id,
            now=now,
            task_id=task_id,
            conversation=conversation,
        )
