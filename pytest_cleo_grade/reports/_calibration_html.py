"""The HTML report's judge calibration section: agreement of the judge with people."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_cleo_grade.core._text import html_text
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._calibration import Calibration, calibrate

__all__ = ["calibration_section"]


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def calibration_section(history: Sequence[GradeResult]) -> str:
    """The section, or "" when no session has both a judged and a manual grade."""
    calibration = calibrate(history)
    if not calibration.dimensions:
        return ""
    return _render(calibration)


def _render(calibration: Calibration) -> str:
    e = html_text
    parts = [
        "<section id='calibration' class='calibration'>\n<h2>Judge calibration</h2>\n",
        f"<p>{len(calibration.sessions)} sessions graded by the judge and by a person "
        "(cleo-grade review). Kappa: Cohen's, quadratic weights.</p>\n",
        "<table><thead><tr><th>dimension</th><th>kind</th><th>pairs</th><th>agreement</th>"
        "<th>weighted kappa</th><th>Spearman</th><th>mean abs diff</th></tr></thead><tbody>\n",
    ]
    for d in calibration.dimensions:
        parts.append(
            f"<tr><td>{e(d.name)}</td><td>{d.kind}</td><td>{d.pairs}</td>"
            f"<td>{d.agreement:.1%}</td><td>{_figure(d.kappa)}</td>"
            f"<td>{_figure(d.spearman)}</td><td>{_figure(d.mean_abs_diff)}</td></tr>\n"
        )
    parts.append("</tbody></table>\n")
    for d in calibration.dimensions:
        if not d.labels:
            continue
        head = "".join(f"<th>{e(label)}</th>" for label in d.labels)
        parts.append(
            f"<table class='confusion'><caption>{e(d.name)}: rows the person, columns the "
            f"judge</caption><thead><tr><th></th>{head}</tr></thead><tbody>\n"
        )
        for label, row in zip(d.labels, d.confusion, strict=True):
            cells = "".join(f"<td>{count}</td>" for count in row)
            parts.append(f"<tr><th>{e(label)}</th>{cells}</tr>\n")
        parts.append("</tbody></table>\n")
    parts.extend(f"<p class='note'>{e(note)}</p>\n" for note in calibration.notes)
    parts.append("</section>\n")
    return "".join(parts)
