"""Verdicts: thresholds, the one pass predicate, percentages shown without contradiction,
a graded test and the run's grade with its gate.

Every message, summary, exit status and JUnit failure asks :func:`passes`, so a banner can
never say FAIL while the exit code says pass.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from pytest_cleo_grade.core._files import compact_json_utf8
from pytest_cleo_grade.core._scale import (
    THRESHOLD_FORMS,
    letter_for,
    parse_grade_threshold,
    round_half_up,
)
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._run_ids import REASON_KEY, STATUS_KEY, Shard, Status, status_of
from pytest_cleo_grade.grading._runs import QUARANTINED, counted_whole

__all__ = [
    "THRESHOLD_FORMS",
    "GradedTest",
    "RunGrade",
    "counted_tests",
    "decode_graded_test",
    "describe_percent",
    "describe_threshold",
    "encode_graded_test",
    "parse_grade_threshold",
    "passes",
    "percent_below",
    "shown_percent",
    "threshold_text",
    "ungradable_result",
]


def passes(percent: float, threshold: float | None) -> bool:
    """The one predicate behind every verdict: the exact percentage reaches the threshold."""
    return threshold is None or percent >= threshold


def describe_percent(percent: float, *, rounding: str = ROUND_HALF_UP) -> str:
    """A percentage for display with at most two decimals: ``67.5%``, ``85%``."""
    exact = Decimal(repr(percent))
    # Enough digits for any float's two decimals (a history may hold 1e30 out of 100; the
    # default 28 would make quantize() raise).
    with localcontext(prec=max(28, exact.adjusted() + 4)):
        text = str(exact.quantize(Decimal("0.01"), rounding=rounding))
    return text.rstrip("0").rstrip(".") + "%"


def threshold_text(threshold: float) -> str:
    """A threshold as written, exactly: ``75%``, ``74.999%`` (rounding it could show a
    figure the score then seems to reach, or a letter beside the wrong number)."""
    exact = Decimal(repr(threshold))
    if exact == exact.quantize(Decimal("0.01")):
        return describe_percent(threshold)
    return f"{exact.normalize():f}%"


def describe_threshold(threshold: float) -> str:
    """A threshold with the letter it corresponds to: ``75% (B)``, ``74.999% (C)``."""
    return f"{threshold_text(threshold)} ({letter_for(threshold)})"


def percent_below(percent: float, threshold: float) -> str:
    """``percent`` for a message saying it is below ``threshold``, never contradicting it.

    Whole percent, half up, as everywhere else, unless that would show the threshold's own
    figure (74.9 % against 75 %): then two decimals, cut rather than rounded (``74.9%``).
    """
    text = f"{round_half_up(percent)}%"
    if Decimal(text[:-1]) >= Decimal(threshold_text(threshold)[:-1]):
        text = describe_percent(percent, rounding=ROUND_DOWN)
    return text


def shown_percent(percent: float, threshold: float | None, *, exact: bool = False) -> str:
    """``percent`` as shown beside a grade: whole (``exact``: up to two decimals), never
    rounded up to the ``threshold`` it fails (82.996 % against 83 % is not "83%")."""
    if threshold is None or passes(percent, threshold):
        return describe_percent(percent) if exact else f"{round_half_up(percent)}%"
    if not exact:
        return percent_below(percent, threshold)
    text = describe_percent(percent)
    if Decimal(text[:-1]) >= Decimal(threshold_text(threshold)[:-1]):
        text = describe_percent(percent, rounding=ROUND_DOWN)
    return text


class GradedTest:
    """One graded test as the controller sees it: the final grade and the threshold it met.

    Immutable. What the run's grade asks of every test (its status, its percentage, the test
    a repeated run belongs to) is read once, when it is made. :meth:`packed` gives the same
    test holding its grade as compressed JSON instead of as a model, decoded again on each
    use of :attr:`result`: what the controller keeps of each finished test, so a suite of
    thousands holds a few hundred bytes a test where a grade's model takes kilobytes.
    """

    __slots__ = (
        "_key",
        "_packed",
        "_packed_payload",
        "_percent",
        "_result",
        "_run",
        "_status",
        "excluded",
        "mode",
        "nodeid",
        "threshold",
        "threshold_source",
    )

    nodeid: str
    threshold: float | None
    threshold_source: str | None
    mode: str
    #: ``"xfailed"`` or ``"xpassed"``: shown, but left out of the run's mean and gate (an
    #: expected failure says nothing about the agent the gate is meant to judge).
    excluded: str | None
    _result: GradeResult | None
    _packed: bytes | None
    #: Whether ``_packed`` is a whole report payload (:func:`encode_graded_test`), the grade
    #: under its ``result``, rather than the grade alone.
    _packed_payload: bool
    _status: Status | None
    _percent: float
    _key: str
    _run: bool

    def __init__(
        self,
        nodeid: str,
        result: GradeResult,
        threshold: float | None,
        threshold_source: str | None,
        mode: str,
        excluded: str | None = None,
    ) -> None:
        extra = result.model_extra or {}
        # A repeated test's runs (extra ``run``) are one test, under its id.
        key = str(extra["testId"]) if "run" in extra and "testId" in extra else nodeid
        self._set(
            nodeid=nodeid,
            threshold=threshold,
            threshold_source=threshold_source,
            mode=mode,
            excluded=excluded,
            _result=result,
            _packed=None,
            _packed_payload=False,
            _status=status_of(result),
            _percent=result.percent,
            _key=key,
            _run=extra.get("run") is not None,
        )

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GradedTest is immutable: cannot set {name!r}")

    def __getstate__(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, object]) -> None:
        # pickle and copy restore through here: immutable, so not through __setattr__.
        self._set(**state)

    @property
    def result(self) -> GradeResult:
        """The grade (decoded again from the packed form on each use: see :meth:`packed`)."""
        if self._result is not None:
            return self._result
        assert self._packed is not None
        data = json.loads(zlib.decompress(self._packed))
        # As a worker's grade is read off its report (decode_graded_test).
        return GradeResult.model_validate(data["result"] if self._packed_payload else data)

    def packed(self, payload: str | None = None) -> GradedTest:
        """This test with its grade held as compressed JSON, not as a model.

        ``payload``: the report payload this grade was decoded from (its
        :func:`encode_graded_test` text), packed as it is rather than encoding the grade again
        (the xdist controller's case).
        """
        if self._packed is not None:
            return self
        copy = object.__new__(GradedTest)
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields["_result"] = None
        if payload is None:
            text = compact_json_utf8(self.result.to_json_dict())
        else:
            text = payload
            fields["_packed_payload"] = True
        # Level 1: a third of the size for a fraction of the time the higher levels take.
        fields["_packed"] = zlib.compress(text.encode("utf-8"), 1)
        copy._set(**fields)
        return copy

    def _arguments(self) -> dict[str, Any]:
        """The constructor's arguments that make this test (what equality compares)."""
        return {
            "nodeid": self.nodeid,
            "result": self.result,
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "mode": self.mode,
            "excluded": self.excluded,
        }

    def replace(self, **changes: Any) -> GradedTest:
        """A copy with some of the constructor's arguments changed (as dataclasses.replace)."""
        arguments = self._arguments()
        unknown = set(changes) - set(arguments)
        if unknown:
            raise TypeError(f"GradedTest has no field {sorted(unknown)[0]!r}")
        return GradedTest(**{**arguments, **changes})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GradedTest):
            return NotImplemented
        return self._arguments() == other._arguments()

    def __hash__(self) -> int:
        return hash((self.nodeid, self.threshold, self.mode, self.excluded))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self._arguments().items())
        return f"GradedTest({shown})"

    @property
    def percent(self) -> float:
        """The grade's exact percentage."""
        return self._percent

    @property
    def test_key(self) -> str:
        """The test this grade belongs to: a repeated test's runs (extra ``run``) are one."""
        return self._key

    @property
    def is_run(self) -> bool:
        """Whether this is one run of a repeated test (its history line has a ``run``)."""
        return self._run

    @property
    def ungradable(self) -> bool:
        """A test that could not be graded (its judge down, its calls unreadable, nothing
        captured): it fails, is counted apart, and has no score to enter any mean."""
        return self._status == "ungradable"

    @property
    def passed(self) -> bool:
        return not self.ungradable and passes(self._percent, self.threshold)

    @property
    def status(self) -> Status:
        """``passed`` | ``below`` | ``ungradable``: against the test's threshold when it has
        one, else as its history line says (a report read from the history)."""
        if self.ungradable:
            return "ungradable"
        if self.threshold is None:
            return self._status or "passed"
        return "passed" if self.passed else "below"

    @property
    def reason(self) -> str | None:
        """Why an ungradable test could not be graded."""
        value = (self.result.model_extra or {}).get(REASON_KEY)
        return value if isinstance(value, str) else None


def ungradable_result(
    session_id: str, *, reason: str, timestamp: datetime, entry_count: int, test_id: str
) -> GradeResult:
    """The history line of a test that could not be graded: no dimensions, no score that
    means anything (0 of 100 only so that CLEO's readers load it), its status and reason."""
    return GradeResult.model_validate(
        {
            "sessionId": session_id,
            "totalScore": 0,
            "maxScore": 100,
            "dimensions": {},
            "flags": [],
            "timestamp": timestamp,
            "entryCount": entry_count,
            "testId": test_id,
            STATUS_KEY: "ungradable",
            REASON_KEY: reason,
        }
    )


def encode_graded_test(test: GradedTest) -> str:
    """The JSON that travels on the call report (a plain string survives any serialiser).

    UTF-8 encodable always: xdist sends it as UTF-8, and agent text may hold a lone
    surrogate (a task id from a file name that is not UTF-8), which JSON escapes spell.
    """
    data = {
        "nodeid": test.nodeid,
        "result": test.result.to_json_dict(),
        "threshold": test.threshold,
        "thresholdSource": test.threshold_source,
        "mode": test.mode,
        "excluded": test.excluded,
    }
    return compact_json_utf8(data)


def decode_graded_test(text: str) -> GradedTest:
    """Inverse of :func:`encode_graded_test`."""
    data: dict[str, Any] = json.loads(text)
    threshold = data["threshold"]
    return GradedTest(
        nodeid=data["nodeid"],
        result=GradeResult.model_validate(data["result"]),
        threshold=None if threshold is None else float(threshold),
        threshold_source=data["thresholdSource"],
        mode=data["mode"],
        excluded=data.get("excluded"),
    )


def _test_of(test: GradedTest) -> str:
    """The test a graded run belongs to: a repeated test's runs (extra ``run``) are one."""
    return test.test_key


def counted_tests(tests: Iterable[GradedTest]) -> tuple[GradedTest, ...]:
    """The graded tests a run's mean, gate and baseline count (see :func:`counted_whole`)."""
    return tuple(counted_whole(tests, _test_of, lambda test: test.excluded))


@dataclass(frozen=True, slots=True)
class RunGrade:
    """The run's grade: the mean of the graded tests' exact percentages, and the gate verdict."""

    tests: tuple[GradedTest, ...]
    gate: float | None
    #: This run is one shard of a split suite: its gate is deferred to the combined run.
    shard: Shard | None = None
    # Worked out once, when the run is made: the summary, the table and the verdict each ask
    # for the mean again, and a suite of thousands of tests paid the grouping every time.
    _counted: tuple[GradedTest, ...] = field(init=False, repr=False, compare=False)
    _percents: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _mean: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counted = counted_tests(self.tests)
        groups: dict[str, list[float]] = {}
        for test in counted:
            if not test.ungradable:  # no score: counted apart, never as a 0
                groups.setdefault(_test_of(test), []).append(test.percent)
        percents = tuple(sum(values) / len(values) for values in groups.values())
        object.__setattr__(self, "_counted", counted)
        object.__setattr__(self, "_percents", percents)
        object.__setattr__(self, "_mean", sum(percents) / len(percents) if percents else None)

    @property
    def counted(self) -> tuple[GradedTest, ...]:
        """The tests the mean and the gate count (xfailed and xpassed ones are not).

        A repeated test is one test: when any of its runs counts (an xfail-marked test of
        which a run failed on its own, pytest's FAILED as one such run is), all of them do.
        """
        return self._counted

    def _per_test(self) -> tuple[float, ...]:
        """One percentage per test: a repeated test's runs (extra ``run``) count once, by
        their mean, so a test run eight times does not weigh eight times in the gate."""
        return self._percents

    @property
    def mean(self) -> float | None:
        return self._mean

    @property
    def letter(self) -> str | None:
        mean = self.mean
        return None if mean is None else letter_for(mean)

    @property
    def ungradable(self) -> tuple[GradedTest, ...]:
        """The counted tests that could not be graded."""
        return tuple(test for test in self.counted if test.ungradable)

    @property
    def below(self) -> tuple[GradedTest, ...]:
        """The counted tests below their threshold. A repeated test's runs are samples, not
        tests below (its decision over all runs is the repeats' summary's to say)."""
        return tuple(test for test in self.counted if test.status == "below" and not test.is_run)

    @property
    def gate_failed(self) -> bool:
        """Whether the gate turns the exit status to 1: the mean of the graded tests is
        below it, or a test could not be graded (a gate never passes on what it could not
        see). Never without a gate or without tests, and never in a shard (deferred)."""
        if self.gate is None or self.shard is not None:
            return False
        if self.ungradable:
            return True
        mean = self.mean
        return mean is not None and not passes(mean, self.gate)

    def mean_text(self) -> str:
        """The mean for display (two decimals, half up), never contradicting the verdict.

        Below the gate, a mean that would round up to the gate's figure is cut instead:
        74.999 % shows as 74.99 %, not as a 75 % that a 75 % gate would call "below".
        """
        mean = self.mean
        if mean is None:
            return "-"
        text = describe_percent(mean)
        if self.gate is not None and self.shard is None and not passes(mean, self.gate):
            shown_gate = describe_percent(self.gate)
            if Decimal(text.rstrip("%")) >= Decimal(shown_gate.rstrip("%")):
                text = describe_percent(mean, rounding=ROUND_DOWN)
        return text

    def verdict(self) -> str | None:
        """The gate line, or None when no gate is set."""
        if self.gate is None:
            return None
        gate = describe_threshold(self.gate)
        held = self._quarantined()
        # A quarantined test is never silently inside a passed gate: the verdict names it.
        aside = f" ({held} quarantined test{'' if held == 1 else 's'} not gated)" if held else ""
        if self.shard is not None:
            return (
                f"gate {gate}: deferred, this is shard {self.shard.label} "
                f"({self.shard.source}); its mean covers only its own tests: combine the "
                "shards (cleo-grade combine) and run cleo-grade report --gate"
            )
        ungradable = len({_test_of(test) for test in self.ungradable})
        if ungradable:
            tests = "test" if ungradable == 1 else "tests"
            mean = "no graded tests" if self.mean is None else f"mean {self.mean_text()}"
            return f"gate FAILED: {ungradable} {tests} could not be graded ({mean}){aside}"
        if self.mean is None:
            return f"gate {gate}: not applied, no graded tests{aside}"
        if self.gate_failed:
            return f"gate FAILED: mean {self.mean_text()} is below {gate}{aside}"
        return f"gate passed: mean {self.mean_text()} reaches {gate}{aside}"

    def _quarantined(self) -> int:
        return len({_test_of(test) for test in self.tests if test.excluded == QUARANTINED})

    def run_line(self) -> str:
        count = len(self._per_test())
        noun = "test" if count == 1 else "tests"
        # Tests, as the count beside it: a repeated xfail test's runs are one test left out.
        counted = {_test_of(test) for test in self.counted}
        left_out = len({_test_of(test) for test in self.tests} - counted) - self._quarantined()
        notes = []
        below = len({_test_of(test) for test in self.below})
        if below:
            notes.append(f"{below} below")
        ungradable = len({_test_of(test) for test in self.ungradable})
        if ungradable:
            notes.append(f"{ungradable} could not be graded")
        if left_out:
            notes.append(f"{left_out} xfail/xpass not counted")
        if self._quarantined():
            notes.append(f"{self._quarantined()} quarantined not counted")
        note = f" ({', '.join(notes)})" if notes else ""
        if self.mean is None:
            return f"no graded tests{note}"
        return f"run grade {self.letter}: mean {self.mean_text()} over {count} graded {noun}{note}"
