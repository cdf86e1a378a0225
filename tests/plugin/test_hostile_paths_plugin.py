"""A pytest run never writes through a link planted where the plugin writes: the history, the
audit store, the HTML report and a saved baseline (DESIGN section 5)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

TEST = """
def test_ok(graded_session):
    graded_session.record("session", "list")
    graded_session.record("session", "end")
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(test_links=TEST)
    (pytester.path / ".cleo" / "metrics").mkdir(parents=True)
    return pytester


def test_a_linked_history_and_store_are_refused_with_warnings_and_their_targets_untouched(
    project: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    history = elsewhere / "GRADES.jsonl"
    history.write_text("precious\n")
    store = elsewhere / "audit.db"
    store.write_bytes(b"")
    before = digest(history), digest(store)
    (project.path / ".cleo" / "metrics" / "GRADES.jsonl").symlink_to(history)
    (project.path / ".cleo" / "audit.db").symlink_to(store)
    result = project.runpytest()
    result.assert_outcomes(passed=1, warnings=1)
    assert (digest(history), digest(store)) == before
    assert sorted(p.name for p in elsewhere.iterdir()) == ["GRADES.jsonl", "audit.db"]
    result.stdout.fnmatch_lines(
        [
            "*/.cleo/audit.db: is a symbolic link;*recording this test into * instead",
            "*grades table not written: */.cleo/audit.db: is a symbolic link;*",
            "*grade history not written: */.cleo/metrics/GRADES.jsonl: *is a symbolic link;*",
        ]
    )


@pytest.mark.parametrize("option", ["--cleo-grade-html", "--cleo-grade-save-baseline"])
def test_a_report_or_baseline_path_that_is_a_link_is_replaced_not_written_through(
    project: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, option: str
) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "precious.txt"
    target.write_text("precious\n")
    (project.path / "out").symlink_to(target)
    project.runpytest(f"{option}=out").assert_outcomes(passed=1)
    assert target.read_text() == "precious\n"
    assert not (project.path / "out").is_symlink()
    assert (project.path / "out").stat().st_size > 0
