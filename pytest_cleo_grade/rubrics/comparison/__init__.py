"""Model comparison: structural checks, score sheets, verdicts and go/no-go.

Pure layer: no pytest, no sqlite. The pytest plugin and ``cleo-grade compare`` both build on
:func:`comparison_grade` (one run -> a GradeResult with the comparison extras) and
:func:`compare_grades` (stored grades -> verdicts and a decision).
"""

from __future__ import annotations

from pytest_cleo_grade.rubrics.comparison.decision import (
    COMPARISON_KEYS,
    MEANINGFUL_GAP,
    Comparison,
    DecideOn,
    MetricGap,
    QueryComparison,
    compare_grades,
    compare_records,
    records_from_grades,
)
from pytest_cleo_grade.rubrics.comparison.render import (
    comparison_properties,
    render_markdown,
    render_text,
)
from pytest_cleo_grade.rubrics.comparison.rubric import (
    COMPARISON_DIMENSIONS,
    ComparisonRubric,
    comparison_grade,
)
from pytest_cleo_grade.rubrics.comparison.scores import (
    METRICS,
    MODES,
    ComparisonError,
    ComparisonRecord,
    Judge,
    Mode,
    OperationalMetrics,
    SubstantiveScores,
    judge_prompt,
    measure_operational,
    parse_judge_answer,
    scores_from_judge,
)
from pytest_cleo_grade.rubrics.comparison.sheets import load_score_sheet, parse_score_sheet
from pytest_cleo_grade.rubrics.comparison.stats import Interval, RunSummary, Stability, bootstrap
from pytest_cleo_grade.rubrics.comparison.structural import (
    SHELL_TOOLS,
    SHELL_WRITES,
    StructuralCheck,
    StructuralConfig,
    check_structure,
)
from pytest_cleo_grade.rubrics.comparison.verdicts import (
    FOLLOW_UP_QUERIES,
    Decision,
    DecisionKind,
    QueryVerdict,
    Round,
    Verdict,
    decide,
    decide_matrix,
    decision_exit_status,
    verdict_for,
)

__all__ = [
    "COMPARISON_DIMENSIONS",
    "COMPARISON_KEYS",
    "FOLLOW_UP_QUERIES",
    "MEANINGFUL_GAP",
    "METRICS",
    "MODES",
    "SHELL_TOOLS",
    "SHELL_WRITES",
    "Comparison",
    "ComparisonError",
    "ComparisonRecord",
    "ComparisonRubric",
    "DecideOn",
    "Decision",
    "DecisionKind",
    "Interval",
    "Judge",
    "MetricGap",
    "Mode",
    "OperationalMetrics",
    "QueryComparison",
    "QueryVerdict",
    "Round",
    "RunSummary",
    "Stability",
    "StructuralCheck",
    "StructuralConfig",
    "SubstantiveScores",
    "Verdict",
    "bootstrap",
    "check_structure",
    "compare_grades",
    "compare_records",
    "comparison_grade",
    "comparison_properties",
    "decide",
    "decide_matrix",
    "decision_exit_status",
    "judge_prompt",
    "load_score_sheet",
    "measure_operational",
    "parse_judge_answer",
    "parse_score_sheet",
    "records_from_grades",
    "render_markdown",
    "render_text",
    "scores_from_judge",
    "verdict_for",
]
