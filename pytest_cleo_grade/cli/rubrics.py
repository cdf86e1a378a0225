"""``cleo-grade rubrics``: list the rubrics, or check a rubric file."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli.common import print_json
from pytest_cleo_grade.core._defaults import DEFAULT_RUBRIC
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    pass

__all__ = ["register"]


def register(subparsers: Any) -> None:
    rubrics = subparsers.add_parser(
        "rubrics",
        help="list the available rubrics, or check a rubric file",
        description="List the registered rubrics (built in, entry points), or validate a "
        "rubric file (weighted, rules or trajectory).",
    )
    rubrics.add_argument(
        "--check", metavar="FILE", help="validate a TOML or JSON rubric file and show it"
    )
    rubrics.add_argument("--json", action="store_true", help="print JSON")
    rubrics.set_defaults(handler=run_rubrics)


def _check_rule_file(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.rubrics.rules import load_rule_file

    spec = load_rule_file(args.check)
    if args.json:
        print_json(spec.model_dump(mode="json"))
        return 0
    print(terminal_text(f"{args.check}: ok (rules {spec.name} {spec.version})"))
    for dimension in spec.dimensions:
        print(
            terminal_text(f"  {dimension.name:<24} max {dimension.max:<4} start {dimension.start}")
        )
        for rule in dimension.rules:
            print(terminal_text(f"    {rule.id:<28} {rule.kind:<10} {rule.points:+d}"))
    return 0


def _check_trajectory_file(args: argparse.Namespace, data: object) -> int:
    from pytest_cleo_grade.rubrics.trajectory import load_trajectory_document

    calls, mode = load_trajectory_document(data, where=str(args.check))
    if args.json:
        print_json({"mode": mode, "expect": [call.label() for call in calls]})
        return 0
    print(terminal_text(f"{args.check}: ok (trajectory, {len(calls)} expected calls, mode {mode})"))
    for position, call in enumerate(calls):
        print(f"  {position + 1:>3} {terminal_text(call.label())}")
    return 0


def run_rubrics(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.judges._redact import redact_url
    from pytest_cleo_grade.rubrics._document import read_document
    from pytest_cleo_grade.rubrics.registry import collect_rubrics, make_plugin_manager
    from pytest_cleo_grade.rubrics.rules import is_rule_document
    from pytest_cleo_grade.rubrics.trajectory import is_trajectory_document
    from pytest_cleo_grade.rubrics.weighted.rubric import (
        CategoricalDimension,
        WeightedJudgeRubric,
        load_rubric_file,
    )

    data = read_document(args.check)[0] if args.check else None
    if args.check and is_trajectory_document(data):
        return _check_trajectory_file(args, data)
    if args.check and is_rule_document(data):
        return _check_rule_file(args)
    if args.check:
        loaded = load_rubric_file(args.check)
        rubric = WeightedJudgeRubric(loaded.spec, source=loaded.source)
        if args.json:
            data = loaded.spec.model_dump(mode="json")
            if data["judge"]["base_url"] is not None:
                # A key written in the URL is never echoed.
                data["judge"]["base_url"] = redact_url(data["judge"]["base_url"])
            print_json(data)
            return 0
        print(terminal_text(f"{args.check}: ok ({rubric.name} {rubric.version})"))
        for dimension in loaded.spec.dimensions:
            if isinstance(dimension, CategoricalDimension):
                scale = " < ".join(c.label for c in dimension.categories)
            else:
                scale = f"{dimension.min:g}..{dimension.max:g}"
            line = f"  {dimension.name:<24} {dimension.type:<12} {dimension.weight:<6g} {scale}"
            print(terminal_text(line))
        return 0
    rubrics = collect_rubrics(make_plugin_manager())
    names = sorted(rubrics, key=lambda name: (name != DEFAULT_RUBRIC, name))
    if args.json:
        print_json(
            [
                {
                    "name": name,
                    "version": rubrics[name].version,
                    "dimensions": dict(rubrics[name].dimensions),
                    "default": name == DEFAULT_RUBRIC,
                }
                for name in names
            ]
        )
        return 0
    for name in names:
        registered = rubrics[name]
        marker = " (default)" if name == DEFAULT_RUBRIC else ""
        dims = ", ".join(f"{d} {m:g}" for d, m in registered.dimensions.items())
        print(terminal_text(f"{name} {registered.version}{marker}: {dims}"))
    return 0
