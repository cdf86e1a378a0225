"""``cleo-grade review`` (a person's scores as a manual grade) and ``cleo-grade calibrate``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    existing_history,
    history_path,
    print_json,
    session_id_arg,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._calibration import Calibration
    from pytest_cleo_grade.rubrics.weighted.spec import RubricSpec

__all__ = ["register"]


def _rate(value: str) -> float:
    try:
        number = float(value.strip().rstrip("%"))
    except ValueError:
        number = -1.0
    if value.strip().endswith("%"):
        number /= 100
    if 0 <= number <= 1:
        return number
    raise argparse.ArgumentTypeError(
        f"invalid agreement {value!r}: expected a share from 0 to 1 (0.8) or a percentage (80%)"
    )


def register(subparsers: Any) -> None:
    review = subparsers.add_parser(
        "review",
        help="record a person's scores for a session as a manual grade",
        description="Record a person's scores for each dimension of a weighted (judge) rubric "
        'as a grade with evaluator "manual": asked one dimension at a time, or given whole '
        "with --scores. cleo-grade calibrate compares them with the judge's grades.",
    )
    review.add_argument("session", type=session_id_arg, metavar="SESSION")
    review.add_argument(
        "--scores",
        metavar="JSON",
        help='every dimension\'s score as JSON, e.g. \'{"goalAchieved": "achieved", '
        "\"efficiency\": 0.8}' (a category's label or number; a number in its range)",
    )
    review.add_argument(
        "--rubric-file",
        dest="rubric_file",
        metavar="FILE",
        help="the weighted rubric file whose dimensions are scored (default: the built-in "
        "weighted rubric)",
    )
    review.add_argument("--reviewer", metavar="NAME", help="who scored (kept on the grade)")
    review.add_argument("--json", action="store_true", help="print the grade as JSON")
    add_db_option(review)
    add_history_option(review)
    review.set_defaults(handler=run_review)
    calibrate = subparsers.add_parser(
        "calibrate",
        help="compare the judge's grades with manual ones, per dimension",
        description="Over the sessions that have both a judged grade and a manual one "
        "(cleo-grade review), per dimension: agreement, Cohen's weighted kappa (quadratic "
        "weights) and the confusion of categories for categorical dimensions, Spearman's rho "
        "and the mean absolute difference for numeric ones.",
    )
    add_history_option(calibrate)
    calibrate.add_argument(
        "--min-agreement",
        dest="min_agreement",
        type=_rate,
        metavar="SHARE",
        help="exit 1 when a dimension's agreement is below it (0.8 or 80%%)",
    )
    calibrate.add_argument("--json", action="store_true", help="print JSON")
    calibrate.set_defaults(handler=run_calibrate)


def _spec(args: argparse.Namespace, where: str) -> RubricSpec:
    from pytest_cleo_grade.core.errors import RubricError
    from pytest_cleo_grade.rubrics.weighted.spec import DEFAULT_SPEC, load_rubric_file

    if args.rubric_file is None:
        return DEFAULT_SPEC
    try:
        return load_rubric_file(args.rubric_file).spec
    except RubricError as exc:
        raise CommandError(f"{where}: {exc}") from None
    except OSError as exc:
        raise CommandError(f"{where}: {args.rubric_file}: {exc.strerror or exc}") from None


def _entry_count(args: argparse.Namespace, session: str, where: str) -> int:
    """The session's calls in the store, else its latest graded count; not found: exit 4."""
    store = db_path(args)
    if store.is_file():
        from pytest_cleo_grade.store import AuditStore

        with AuditStore(store, read_only=True) as audit:
            count = audit.count(session)
        if count:
            return count
    history = history_path(args)
    if history.is_file():
        from pytest_cleo_grade.store._history_index import grades_where
        from pytest_cleo_grade.store.history import read_grades

        with warnings_to_stderr():
            # Through the history's index, only the session's lines are read.
            graded = grades_where(history, "session_id = ?", (session,))
            if graded is None:
                graded = read_grades(history, session_id=session)
        if graded:
            return graded[-1].entry_count
    raise CommandError(f"{where}: session {session} not found", status=4)


def _ask(spec: RubricSpec, where: str) -> dict[str, object]:
    """One dimension at a time on stdin; a bad answer is asked again, end of input cancels."""
    from pytest_cleo_grade.rubrics.weighted._manual import parse_score
    from pytest_cleo_grade.rubrics.weighted.spec import CategoricalDimension

    scores: dict[str, object] = {}
    for dimension in spec.dimensions:
        if isinstance(dimension, CategoricalDimension):
            choices = ", ".join(f"{c.label} ({c.value})" for c in dimension.categories)
        else:
            choices = f"a number from {dimension.min:g} to {dimension.max:g}"
        print(f"{dimension.name}: {dimension.description}".rstrip(": "))
        while True:
            sys.stdout.write(f"  {choices}? ")
            sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                raise CommandError(f"{where}: no answer for {dimension.name}: nothing saved")
            text = line.strip()
            answer: object = text
            if not isinstance(dimension, CategoricalDimension):
                try:
                    answer = float(text)
                except ValueError:
                    answer = text
            try:
                scores[dimension.name] = parse_score(spec, dimension.name, answer)
            except ValueError as exc:
                print(f"  {terminal_text(exc)}")
                continue
            break
    return scores


def run_review(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.cli._grading import save_grade
    from pytest_cleo_grade.rubrics.weighted._manual import manual_grade

    where = "cleo-grade review"
    spec = _spec(args, where)
    count = _entry_count(args, args.session, where)
    if args.scores is not None:
        try:
            scores = json.loads(args.scores)
        except ValueError as exc:
            raise CommandError(f"{where}: --scores: not JSON ({exc})") from None
        if not isinstance(scores, dict):
            raise CommandError(f"{where}: --scores: expected a JSON object of dimension: score")
    else:
        scores = _ask(spec, where)
    try:
        result = manual_grade(
            spec, scores, session_id=args.session, entry_count=count, reviewer=args.reviewer
        )
    except ValueError as exc:
        raise CommandError(f"{where}: --scores: {exc}") from None
    store = db_path(args)
    save_grade(result, history=history_path(args), store=store if store.is_file() else None)
    if args.json:
        print_json(result.model_dump(mode="json", by_alias=True))
        return 0
    print(
        f"manual grade of {terminal_text(args.session)}: {result.total_score:g}/100 "
        f"({result.letter}) saved to {terminal_text(history_path(args))}"
    )
    return 0


def _figure(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def calibration_lines(calibration: Calibration) -> list[str]:
    """The table of dimensions and each categorical dimension's confusion table."""
    lines = [
        f"calibration over {len(calibration.sessions)} sessions graded by the judge and by "
        "a person",
        f"  {'dimension':<24} {'kind':<11} {'pairs':>5} {'agreement':>9} "
        f"{'kappa (quadratic)':>17} {'spearman':>8} {'mean abs diff':>13}",
    ]
    for d in calibration.dimensions:
        lines.append(
            f"  {terminal_text(d.name):<24} {d.kind:<11} {d.pairs:>5} {d.agreement:>9.1%} "
            f"{_figure(d.kappa, '.3f'):>17} {_figure(d.spearman, '.3f'):>8} "
            f"{_figure(d.mean_abs_diff, '.3f'):>13}"
        )
    for d in calibration.dimensions:
        if not d.labels:
            continue
        width = max(len(label) for label in d.labels)
        lines.append(f"confusion of {terminal_text(d.name)} (rows: person, columns: judge):")
        lines.append(
            "  " + " " * width + "".join(f"  {terminal_text(x):>{width}}" for x in d.labels)
        )
        for label, row in zip(d.labels, d.confusion, strict=True):
            cells = "".join(f"  {count:>{width}}" for count in row)
            lines.append(f"  {terminal_text(label):<{width}}{cells}")
    lines.extend(f"note: {terminal_text(note)}" for note in calibration.notes)
    return lines


def calibration_json(calibration: Calibration) -> dict[str, Any]:
    return {
        "sessions": list(calibration.sessions),
        "dimensions": [
            {
                "name": d.name,
                "kind": d.kind,
                "pairs": d.pairs,
                "agreement": round(d.agreement, 4),
                "kappa": None if d.kappa is None else round(d.kappa, 4),
                "kappaWeights": "quadratic" if d.kind == "categorical" else None,
                "spearman": None if d.spearman is None else round(d.spearman, 4),
                "meanAbsDiff": None if d.mean_abs_diff is None else round(d.mean_abs_diff, 4),
                "labels": list(d.labels),
                "confusion": [list(row) for row in d.confusion],
            }
            for d in calibration.dimensions
        ],
        "notes": list(calibration.notes),
    }


def run_calibrate(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._calibration import calibrate
    from pytest_cleo_grade.store._history_index import BY_HAND, grades_where
    from pytest_cleo_grade.store.history import read_grades

    where = "cleo-grade calibrate"
    history = existing_history(args, where=where)
    with warnings_to_stderr():
        # Only sessions graded by hand pair with a judge: through the history's index, only
        # their lines are read.
        results = grades_where(Path(history), BY_HAND)
        if results is None:
            results = read_grades(Path(history))
    calibration = calibrate(results)
    if not calibration.dimensions:
        raise CommandError(
            f"{where}: {history}: no session has both a judged grade and a manual one "
            "(cleo-grade review SESSION records a manual grade)"
        )
    below = [
        d
        for d in calibration.dimensions
        if args.min_agreement is not None and d.agreement < args.min_agreement
    ]
    if args.json:
        data = calibration_json(calibration)
        if args.min_agreement is not None:
            data["gate"] = {"minAgreement": args.min_agreement, "below": [d.name for d in below]}
        print_json(data)
    else:
        for line in calibration_lines(calibration):
            print(line)
        if args.min_agreement is not None:
            if below:
                names = ", ".join(f"{terminal_text(d.name)} {d.agreement:.1%}" for d in below)
                print(f"calibration gate FAILED: agreement below {args.min_agreement:.0%}: {names}")
            else:
                print(f"calibration gate passed: every agreement reaches {args.min_agreement:.0%}")
    return 1 if below else 0
