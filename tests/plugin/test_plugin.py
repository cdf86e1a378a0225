"""The pytest plugin: the fixture, thresholds and their precedence, failures, validation."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.plugin_suites import FORTY_FLAGS, make_suite


def history_lines(pytester: pytest.Pytester) -> list[dict[str, object]]:
    path = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_grade_below_the_threshold_fails_the_test_with_the_full_grade(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_sloppy(graded_session):\n    forty(graded_session)\n")
    result = pytester.runpytest("--cleo-grade-fail-under=B")
    result.assert_outcomes(failed=1)
    assert "grade 40/100 (40%, grade F)\n" not in result.stdout.str()  # no second copy
    result.stdout.fnmatch_lines(
        [
            "*_ test_sloppy _*",
            "cleo-grade: 40/100 (40%, grade F) is below the threshold 75% (B)"
            " set by --cleo-grade-fail-under",
            "session session-*, 1 audit entries",
            "dimensions:",
            "  sessionDiscipline      0/20",
            "  discoveryEfficiency    0/20",
            "  taskHygiene           20/20",
            "  errorProtocol         20/20",
            "  disclosureUse          0/20",
            "flags (5):",
            *(f"  - {flag}" for flag in FORTY_FLAGS),
            "FAILED test_agent.py::test_sloppy - Failed: cleo-grade: 40/100 (40%, grade F)*",
        ]
    )
    assert "ERROR" not in result.stdout.str()


@pytest.mark.parametrize(
    ("threshold", "outcome"),
    [
        pytest.param("B", "passed", id="letter-B-is-75"),
        pytest.param("75", "passed", id="75"),
        pytest.param("75%", "passed", id="75-percent"),
        pytest.param("74.9", "passed", id="74.9"),
        pytest.param("75.01", "failed", id="75.01-fails"),
        pytest.param("A", "failed", id="letter-A-fails"),
        pytest.param("F", "passed", id="F-is-no-minimum"),
    ],
)
def test_a_score_passes_exactly_when_its_percentage_reaches_the_threshold(
    pytester: pytest.Pytester, threshold: str, outcome: str
) -> None:
    make_suite(pytester, "def test_b(graded_session):\n    seventy_five(graded_session)\n")
    result = pytester.runpytest(f"--cleo-grade-fail-under={threshold}")
    result.assert_outcomes(**{outcome: 1})


def test_without_any_threshold_a_low_grade_does_not_fail_the_test(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_sloppy(graded_session):\n    forty(graded_session)\n")
    pytester.runpytest().assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("ini", "args", "marker", "outcome"),
    [
        pytest.param("cleo_grade_fail_under = A", [], "", "failed", id="ini-applies"),
        pytest.param("cleo_grade_fail_under = C", [], "", "passed", id="ini-passes"),
        pytest.param(
            "cleo_grade_fail_under = A",
            ["--cleo-grade-fail-under=C"],
            "",
            "passed",
            id="cli-beats-ini",
        ),
        pytest.param(
            "cleo_grade_fail_under = C",
            ["--cleo-grade-fail-under=A"],
            "",
            "failed",
            id="cli-beats-ini-the-other-way",
        ),
        pytest.param(
            "",
            ["--cleo-grade-fail-under=A"],
            "@pytest.mark.cleo_grade(fail_under='C')",
            "passed",
            id="marker-beats-cli",
        ),
        pytest.param(
            "cleo_grade_fail_under = C",
            ["--cleo-grade-fail-under=C"],
            "@pytest.mark.cleo_grade(fail_under=90)",
            "failed",
            id="marker-beats-cli-and-ini",
        ),
    ],
)
def test_the_marker_beats_the_command_line_which_beats_the_ini_file(
    pytester: pytest.Pytester, ini: str, args: list[str], marker: str, outcome: str
) -> None:
    make_suite(
        pytester,
        f"{marker}\ndef test_b(graded_session):\n    seventy_five(graded_session)\n",
        ini,
    )
    pytester.runpytest(*args).assert_outcomes(**{outcome: 1})


def test_the_failure_message_names_the_marker_or_ini_key_that_set_the_threshold(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(fail_under="85%")
        def test_marked(graded_session):
            seventy_five(graded_session)

        def test_ini(graded_session):
            seventy_five(graded_session)
        """,
        "cleo_grade_fail_under = 80",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*below the threshold 85% (B) set by @pytest.mark.cleo_grade(fail_under=...)",
            "*below the threshold 80% (B) set by ini cleo_grade_fail_under",
        ]
    )


@pytest.mark.parametrize(
    ("ini", "args", "marker", "outcome"),
    [
        pytest.param("", ["--cleo-grade-mode=report"], "", "passed", id="cli-report"),
        pytest.param("cleo_grade_mode = report", [], "", "passed", id="ini-report"),
        pytest.param(
            "cleo_grade_mode = report",
            ["--cleo-grade-mode=fail"],
            "",
            "failed",
            id="cli-fail-beats-ini-report",
        ),
        pytest.param(
            "",
            ["--cleo-grade-mode=report"],
            "@pytest.mark.cleo_grade(mode='fail')",
            "failed",
            id="marker-fail-beats-cli-report",
        ),
        pytest.param(
            "", [], "@pytest.mark.cleo_grade(mode='report')", "passed", id="marker-report"
        ),
    ],
)
def test_report_mode_annotates_without_failing(
    pytester: pytest.Pytester, ini: str, args: list[str], marker: str, outcome: str
) -> None:
    make_suite(
        pytester,
        f"{marker}\ndef test_sloppy(graded_session):\n    forty(graded_session)\n",
        ini,
    )
    result = pytester.runpytest("--cleo-grade-fail-under=A", *args)
    result.assert_outcomes(**{outcome: 1})
    # Graded either way: the summary lists the test with its grade.
    result.stdout.fnmatch_lines(["test_agent.py::test_sloppy *40/100 *40% *F *5 *"])


def test_markers_on_class_and_function_merge_with_the_closest_winning(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(fail_under="A", mode="report")
        class TestAgent:
            @pytest.mark.cleo_grade(fail_under="C")
            def test_inherits_report_mode(self, graded_session):
                forty(graded_session)

            @pytest.mark.cleo_grade(mode="fail")
            def test_inherits_threshold_a(self, graded_session):
                seventy_five(graded_session)
        """,
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestAgent.test_inherits_threshold_a _*",
            "cleo-grade: 75/100 (75%, grade B) is below the threshold 90% (A) set by @pytest*",
        ]
    )


def test_a_test_that_fails_on_its_own_keeps_its_failure_and_is_still_graded(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        def test_broken(graded_session):
            forty(graded_session)
            assert 1 + 1 == 3, "the agent crashed"
        """,
    )
    result = pytester.runpytest("--cleo-grade-fail-under=A")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: the agent crashed*",
            "*- CLEO grade -*",
            "grade 40/100 (40%, grade F)",
            "session session-*, 1 audit entries",
            "dimensions:",
            "  sessionDiscipline      0/20",
        ]
    )
    assert "is below the threshold" not in result.stdout.str()
    [line] = history_lines(pytester)
    assert (line["testId"], line["totalScore"]) == ("test_agent.py::test_broken", 40)


def test_a_test_skipped_or_xfailed_from_its_body_is_not_graded(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        def test_skips(graded_session):
            forty(graded_session)
            pytest.skip("not today")

        def test_xfails(graded_session):
            forty(graded_session)
            pytest.xfail("known gap")
        """,
    )
    result = pytester.runpytest("--cleo-grade-fail-under=A")
    result.assert_outcomes(skipped=1, xfailed=1)
    assert not (pytester.path / ".cleo" / "metrics").exists()


def test_the_fixture_exposes_the_session_and_grade_sets_result(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        import os
        from pathlib import Path

        def test_api(graded_session, tmp_path):
            assert graded_session.id.startswith("session-")
            assert graded_session.result is None
            graded_session.record("session", "list", gateway="cleo_query")
            graded_session.dispatcher.register("tasks", "find", lambda params: ["T1"])
            assert graded_session.dispatcher.query("tasks", "find", {"query": "x"}) == ["T1"]
            source = tmp_path / "more.jsonl"
            source.write_text(
                '{"timestamp": "2026-03-01T12:00:00Z", "domain": "admin", "operation": "help",'
                ' "result": {"success": true}, "metadata": {"gateway": "cleo_query"}}\\n'
            )
            assert graded_session.ingest(source) == 1
            ops = [(e.domain, e.operation) for e in graded_session.entries]
            assert sorted(ops) == [("admin", "help"), ("session", "list"), ("tasks", "find")]
            result = graded_session.grade()
            assert graded_session.result is result
            assert result.entry_count == 3
            env = graded_session.env
            assert {k: os.environ[k] for k in env} == env
            assert env["CLEO_SESSION_GRADE"] == "true"
            assert env["CLEO_SESSION_ID"] == env["CLEO_SESSION_GRADE_ID"] == graded_session.id
            assert Path(env["CLEO_AUDIT_DB"]).is_absolute()
        """,
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_final_grade_is_visible_to_fixtures_tearing_down_after_the_body(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        seen = []

        @pytest.fixture
        def watcher(graded_session):
            yield
            seen.append((graded_session.result.testId, graded_session.result.total_score))

        def test_watched(watcher, graded_session):
            seventy_five(graded_session)

        def test_check():
            assert seen == [("test_agent.py::test_watched", 75)]
        """,
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


@pytest.mark.e2e
def test_entries_recorded_by_a_subprocess_are_graded(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        import subprocess, sys

        CHILD = (
            "from pytest_cleo_grade.capture.audit import record\\n"
            "record('session', 'end', gateway='cleo_mutate')\\n"
            "record('admin', 'help', gateway='cleo_query')\\n"
        )

        @pytest.mark.cleo_grade(fail_under="A")
        def test_child_process_finishes_the_job(graded_session):
            seventy_five(graded_session)
            subprocess.run([sys.executable, "-c", CHILD], check=True)
        """,
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    [line] = history_lines(pytester)
    assert (line["entryCount"], line["totalScore"]) == (4, 95)


def test_the_fixture_restores_the_environment_it_found(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_SESSION_ID", "outer-session")
    monkeypatch.setenv("CLEO_AUDIT_DB", "/elsewhere/audit.db")
    monkeypatch.delenv("CLEO_SESSION_GRADE", raising=False)
    monkeypatch.delenv("CLEO_SESSION_GRADE_ID", raising=False)
    make_suite(
        pytester,
        """
        import os

        def test_inside(graded_session):
            assert os.environ["CLEO_SESSION_ID"] == graded_session.id
            assert os.environ["CLEO_SESSION_GRADE"] == "true"
            graded_session.record("session", "list")

        def test_after():
            assert os.environ["CLEO_SESSION_ID"] == "outer-session"
            assert os.environ["CLEO_AUDIT_DB"] == "/elsewhere/audit.db"
            assert "CLEO_SESSION_GRADE" not in os.environ
            assert "CLEO_SESSION_GRADE_ID" not in os.environ
        """,
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)
    assert os.environ["CLEO_SESSION_ID"] == "outer-session"
    assert "CLEO_SESSION_GRADE" not in os.environ


def test_session_ids_are_unique_per_test_and_history_gets_one_line_per_test(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.parametrize("n", range(4))
        def test_many(graded_session, n):
            perfect(graded_session)
            graded_session.grade()  # explicit grades are never written
            graded_session.grade()
        """,
    )
    pytester.runpytest().assert_outcomes(passed=4)
    lines = history_lines(pytester)
    assert sorted(str(line["testId"]) for line in lines) == [
        f"test_agent.py::test_many[{n}]" for n in range(4)
    ]
    assert len({line["sessionId"] for line in lines}) == 4


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        pytest.param(
            ["--cleo-grade-fail-under=Z"],
            "",
            "argument --cleo-grade-fail-under: invalid grade 'Z': expected a letter A, B, C, D*",
            id="cli-fail-under",
        ),
        pytest.param(
            ["--cleo-grade-gate=101"],
            "",
            "argument --cleo-grade-gate: invalid grade '101': expected a letter A, B, C, D or F*",
            id="cli-gate",
        ),
        # float() reads other scripts' digits: an Arabic-Indic three was a 3% threshold.
        pytest.param(
            ["--cleo-grade-fail-under=\u0663"],
            "",
            "argument --cleo-grade-fail-under: invalid grade '\u0663': expected a letter A, B*",
            id="cli-non-ascii-digit",
        ),
        pytest.param(
            [],
            "cleo_grade_gate = 7_5",
            "*cleo-grade: ini option cleo_grade_gate: invalid grade '7_5'*A, B, C, D or F*",
            id="ini-underscore",
        ),
        pytest.param(
            ["--cleo-grade-mode=loud"],
            "",
            "argument --cleo-grade-mode: invalid mode 'loud': expected fail * or report *",
            id="cli-mode",
        ),
        pytest.param(
            [],
            "cleo_grade_fail_under = great",
            "*cleo-grade: ini option cleo_grade_fail_under: invalid grade 'great'*A, B, C, D or F*",
            id="ini-fail-under",
        ),
        pytest.param(
            [],
            "cleo_grade_gate = nan",
            "*cleo-grade: ini option cleo_grade_gate: invalid grade 'nan'*A, B, C, D or F*",
            id="ini-gate",
        ),
        pytest.param(
            [],
            "cleo_grade_mode = strict",
            "*cleo-grade: ini option cleo_grade_mode: invalid mode 'strict'*fail*report*",
            id="ini-mode",
        ),
        # A path with no last component was an INTERNALERROR from pathlib.
        pytest.param(
            ["--cleo-grade-db=/"],
            "",
            "cleo-grade: --cleo-grade-db: / is a directory, not a file",
            id="cli-db-root",
        ),
        pytest.param(
            [],
            "cleo_grade_history = /",
            "cleo-grade: ini option cleo_grade_history: / is a directory, not a file",
            id="ini-history-root",
        ),
        # An empty path was taken for no option at all, the default store used unsaid.
        pytest.param(
            ["--cleo-grade-db="],
            "",
            "cleo-grade: --cleo-grade-db: an empty path (name a file)",
            id="cli-db-empty",
        ),
    ],
)
def test_invalid_option_values_are_usage_errors_naming_the_option_and_the_forms(
    pytester: pytest.Pytester, args: list[str], ini: str, expected: str
) -> None:
    make_suite(pytester, "def test_b(graded_session):\n    seventy_five(graded_session)\n", ini)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{expected}"])


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        pytest.param(
            "cleo_grade(fail_under='G')",
            "*test_b: @pytest.mark.cleo_grade(fail_under=...): invalid grade 'G'*A, B, C, D or F*",
            id="bad-threshold",
        ),
        pytest.param(
            "cleo_grade(fail_under=True)",
            "*@pytest.mark.cleo_grade(fail_under=...): invalid grade True*",
            id="bool-threshold",
        ),
        pytest.param(
            "cleo_grade(mode='quiet')",
            "*@pytest.mark.cleo_grade(mode=...): invalid mode 'quiet'*fail*report*",
            id="bad-mode",
        ),
        pytest.param(
            "cleo_grade(threshold='B')",
            "*@pytest.mark.cleo_grade: unknown argument 'threshold';"
            " accepted: fail_under, mode, rubric, *",
            id="unknown-kwarg",
        ),
        pytest.param(
            "cleo_grade('B')",
            "*@pytest.mark.cleo_grade: takes keyword arguments only*",
            id="positional",
        ),
    ],
)
def test_invalid_marker_arguments_are_usage_errors_naming_the_test(
    pytester: pytest.Pytester, marker: str, expected: str
) -> None:
    make_suite(
        pytester,
        f"@pytest.mark.{marker}\ndef test_b(graded_session):\n    seventy_five(graded_session)\n",
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])


def test_an_invalid_marker_a_fixture_adds_fails_the_test_with_its_message_once(
    pytester: pytest.Pytester,
) -> None:
    # Failed inside the except that caught it, the message was shown twice, joined by
    # "During handling of the above exception, another exception occurred:".
    make_suite(
        pytester,
        """
        @pytest.fixture
        def strict(request):
            request.applymarker(pytest.mark.cleo_grade(fail_under="great"))

        def test_b(strict, graded_session):
            seventy_five(graded_session)
        """,
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"_+ test_b _+", line))
    assert lines[start + 1].startswith(
        "cleo-grade: test_agent.py::test_b: @pytest.mark.cleo_grade(fail_under=...): invalid "
        "grade 'great'"
    )
    assert "short test summary info" in lines[start + 2]  # the one line, and nothing else


def test_the_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(fail_under='C')\n"
        "def test_b(graded_session):\n    seventy_five(graded_session)\n",
    )
    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)
    pytester.runpytest("--markers").stdout.fnmatch_lines(
        ["@pytest.mark.cleo_grade(fail_under=GRADE, mode='fail'|'report', rubric=NAME, *): *"]
    )


def test_the_options_live_in_one_group_in_the_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "grade AI agents' audit logs (pytest-cleo-grade):",
            "  --cleo-grade-fail-under=GRADE",
            "*--cleo-grade-mode=MODE*",
            "*--cleo-grade-gate=GRADE*",
            "*--cleo-grade-db=PATH*",
            "*--cleo-grade-history=PATH*",
        ]
    )
    # (string | int | float) where pytest reads a native TOML table's numbers (9.2+)
    result.stdout.fnmatch_lines(["  cleo_grade_fail_under (string*):*"])


def test_the_readme_options_table_lists_every_option_and_ini_key(pytester: pytest.Pytester) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    # The table of the plugin's "Options" section: its rows up to the first non-table line.
    section = readme.split("\n### Options\n", 1)[1]
    rows = section[section.index("\n|") + 1 :].split("\n\n", 1)[0].splitlines()
    table = [line for line in rows if line.startswith("| `--cleo-grade-")]
    help_text = pytester.runpytest("--help").stdout.str()
    options = sorted(set(re.findall(r"--cleo-grade-[a-z-]+", help_text)))
    ini_keys = sorted(set(re.findall(r"^  (cleo_grade_[a-z_]+) ", help_text, re.MULTILINE)))
    assert len(options) == len(ini_keys) == len(table) == 26
    # Every row shows OPTION=VALUE (a flag: OPTION); sorting by the option alone keeps --x
    # before --x-file.
    rows = sorted(table, key=lambda row: re.split(r"[=`]", row[3:])[0])
    for option, row in zip(options, rows, strict=True):
        assert row.startswith((f"| `{option}=", f"| `{option}`"))
        assert f"`{option[2:].replace('-', '_')}`" in row


@pytest.mark.skipif(
    pytest.version_tuple < (9, 2), reason="typed values of a plugin's ini key need pytest 9.2"
)
def test_a_native_toml_table_takes_numbers_and_booleans_as_toml_types_them(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        def test_b(graded_session):
            seventy_five(graded_session)

        def test_empty(graded_session):
            pass
        """,
    )
    (pytester.path / "tox.ini").unlink()
    pytester.makepyprojecttoml(
        """
        [tool.pytest]
        addopts = ["-p", "no:cacheprovider"]
        filterwarnings = ["default"]
        cleo_grade_fail_under = 80
        cleo_grade_allow_empty = true
        cleo_grade_runs = 2
        cleo_grade_baseline_required = false
        """
    )
    result = pytester.runpytest()
    # Two runs each (a repeated test is decided on its last run); 75% is below 80; the empty
    # session grades 0/100 under allow_empty instead of failing for capturing nothing.
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_b: stable fail, FAILED over 2 runs: mean 75% is below 80% (B)",
            "*test_empty: stable fail, FAILED over 2 runs: mean 0% is below 80% (B)",
        ]
    )


def test_path_options_expand_home_and_variables_as_junitxml_does(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A quoted ~ or a CI variable reaches pytest unexpanded; pytest's own --junitxml and
    # cache_dir expand them. Unexpanded, the files went to a directory literally named "~".
    home = pytester.path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLEO_TEST_OUT", str(pytester.path / "out"))
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
        """,
    )
    pytester.makeini("[pytest]\ncleo_grade_db = $CLEO_TEST_OUT/audit.db\n")
    result = pytester.runpytest(
        "--cleo-grade-history=~/grades.jsonl",
        "--cleo-grade-html=${CLEO_TEST_OUT}/report.html",
        "--cleo-grade-save-baseline=~/baseline.json",
    )
    result.assert_outcomes(passed=1)
    assert len((home / "grades.jsonl").read_text().splitlines()) == 1
    assert (pytester.path / "out" / "audit.db").stat().st_size > 0
    assert (pytester.path / "out" / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((home / "baseline.json").read_text())
    assert not (pytester.path / "~").exists()
    assert not list(pytester.path.glob("$*"))


@pytest.mark.parametrize("suffix", ["", "-wal"])
@pytest.mark.parametrize(
    "option", ["--cleo-grade-history", "--cleo-grade-save-baseline", "--cleo-grade-html"]
)
def test_a_file_the_run_writes_is_never_the_audit_store(
    pytester: pytest.Pytester, option: str, suffix: str
) -> None:
    # The history on the store waited forever on the store's own lock; a baseline replaced
    # the store with JSON; lines appended to its -wal vanished when SQLite removed it.
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
        """,
    )
    pytester.runpytest().assert_outcomes(passed=1)
    store = pytester.path / ".cleo" / "audit.db"
    before = store.read_bytes()
    result = pytester.runpytest(f"{option}=.cleo/audit.db{suffix}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: cleo-grade: {option} (ini *) {store}{suffix}: is the audit store's file *"]
    )
    assert store.read_bytes() == before


#: A valid rule file (CLEO's rubric as rules): the run reads it when it gets that far.
CLEO_RULES = Path(__file__).resolve().parents[2] / "pytest_cleo_grade" / "rubrics" / "cleo.toml"


@pytest.mark.parametrize(
    ("args", "ini", "written", "other"),
    [
        pytest.param(
            ["--cleo-grade-save-baseline=b.json", "--cleo-grade-html=./b.json"],
            "",
            "--cleo-grade-html",
            "--cleo-grade-save-baseline",
            id="report-over-the-baseline-it-saves",
        ),
        pytest.param(
            ["--cleo-grade-rubric=rules", "--cleo-grade-html=sub/../rules.toml"],
            "cleo_grade_rubric_file = rules.toml\n",
            "--cleo-grade-html",
            "--cleo-grade-rubric-file",
            id="report-over-the-ini-rubric-file",
        ),
        pytest.param(
            ["--cleo-grade-rubric=rules", "--cleo-grade-rubric-file=rules.toml"],
            "cleo_grade_save_baseline = rules.toml\n",
            "--cleo-grade-save-baseline",
            "--cleo-grade-rubric-file",
            id="baseline-over-the-rubric-file",
        ),
        pytest.param(
            [
                "--cleo-grade-rubric=rules",
                "--cleo-grade-rubric-file=rules.toml",
                "--cleo-grade-history=linked/rules.toml",
            ],
            "",
            "--cleo-grade-history",
            "--cleo-grade-rubric-file",
            id="history-appended-to-the-rubric-file-through-a-linked-directory",
        ),
        pytest.param(
            [
                "--cleo-grade-rubric=rules",
                "--cleo-grade-rubric-file=link.toml",
                "--cleo-grade-html=rules.toml",
            ],
            "",
            "--cleo-grade-html",
            "--cleo-grade-rubric-file",
            id="report-over-the-file-a-linked-rubric-file-names",
        ),
    ],
)
def test_two_path_options_naming_one_file_are_one_usage_error_before_anything_is_written(
    pytester: pytest.Pytester, args: list[str], ini: str, written: str, other: str
) -> None:
    # The page replaced the baseline this run had just saved, or the rule file (the next run
    # then failed on invalid TOML); the history's lines turned the rule file into no TOML.
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
        """,
        ini=ini,
    )
    rules = pytester.path / "rules.toml"
    rules.write_bytes(CLEO_RULES.read_bytes())
    (pytester.path / "sub").mkdir()
    (pytester.path / "linked").symlink_to(pytester.path, target_is_directory=True)
    (pytester.path / "link.toml").symlink_to(rules)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, errors
    line = f"ERROR: cleo-grade: {written} (ini *) {pytester.path}/*: is also the file of "
    result.stderr.fnmatch_lines([f"{line}{other} (ini *)*; * would destroy the *: choose *"])
    assert rules.read_bytes() == CLEO_RULES.read_bytes()
    assert not (pytester.path / "b.json").exists()
    assert not (pytester.path / ".cleo" / "metrics").exists()  # no test ran


@pytest.mark.inner_plugins("html")
def test_our_report_and_pytest_htmls_on_one_path_are_one_usage_error(
    pytester: pytest.Pytester,
) -> None:
    # Both said they wrote the page; pytest-html's was lost under ours.
    pytest.importorskip("pytest_html", reason="pytest-html is a development dependency")
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
        """,
    )
    result = pytester.runpytest("--cleo-grade-html=page.html", "--html=./page.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: cleo-grade: --html (pytest-html) {pytester.path / 'page.html'}: is also the "
            "file of --cleo-grade-html (ini cleo_grade_html); one would destroy the other: "
            "choose another path"
        ]
    )
    assert not (pytester.path / "page.html").exists()
    # Without pytest-html its option does not exist, and ours alone is written.
    result = pytester.runpytest("-p", "no:html", "--cleo-grade-html=page.html")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "page.html").read_text().startswith("<!DOCTYPE html>")


def test_pytests_own_report_files_are_never_one_of_ours(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
        """,
    )
    pytester.runpytest().assert_outcomes(passed=1)
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    before = history.read_bytes()
    result = pytester.runpytest("--junitxml=.cleo/metrics/GRADES.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: cleo-grade: --junitxml {history}: is also the file of --cleo-grade-history *"]
    )
    assert history.read_bytes() == before
    store = pytester.path / ".cleo" / "audit.db"
    result = pytester.runpytest("--junitxml=.cleo/audit.db-wal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: cleo-grade: --junitxml {store}-wal: is the audit store's *"]
    )


E2E = pytest.mark.e2e

KEPT_PROBE = """
from pytest_cleo_grade.plugin._state import ITEM_KEY, RUN_KEY

def pytest_sessionfinish(session):
    kept = session.config.stash[RUN_KEY].controller.graded.values()
    on_items = [i.stash[ITEM_KEY].graded for i in session.items if ITEM_KEY in i.stash]
    print(f"\\nKEPT {len(kept)} packed={sum(t._result is None for t in kept)}"
          f" as-it-came={sum(t._packed_payload for t in kept)}"
          f" on-items={sum(g is not None for g in on_items)}")
"""


@pytest.mark.parametrize(
    ("workers", "came"),
    [pytest.param([], 0, id="plain"), pytest.param(["-n", "1"], 2, id="xdist", marks=E2E)],
)
def test_a_saved_grade_is_kept_packed_and_the_summary_still_reads_it(
    pytester: pytest.Pytester, workers: list[str], came: int
) -> None:
    # A suite of thousands keeps a few hundred bytes a test until the end, not each grade's
    # model (docs/performance.md); the table at the end reads the packed grades back.
    make_suite(
        pytester,
        "def test_a(graded_session):\n    forty(graded_session)\n\n"
        "def test_b(graded_session):\n    forty(graded_session)\n",
    )
    pytester.makeconftest(KEPT_PROBE)
    result = pytester.runpytest("-s", "--cleo-grade-mode=report", *workers)
    result.assert_outcomes(passed=2)
    # The xdist controller collects no items of its own: none of them holds a grade either.
    # A worker's grade is packed from the payload its report brought (no encoding again).
    result.stdout.fnmatch_lines([f"KEPT 2 packed=2 as-it-came={came} on-items=0"])
    result.stdout.fnmatch_lines(["*test_a*40/100*", "*test_b*40/100*"])
