"""A history rewritten under its lock (``cleo-grade history compact``) loses no append: a
writer that waited for the lock appends to the new file, not the replaced one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cleo_grade.core.errors import HistoryError
from pytest_cleo_grade.store.history import locked_history
from tests.cli.test_history_compact import line
from tests.processes import DEADLINE, wait_until_open

#: A pytest run's controller appending one grade (argv[2]: its run id) to the history.
APPENDER = """
import sys
from pathlib import Path
from tests.cli.test_history_compact import grade
from pytest_cleo_grade.store.history import append_grades
append_grades([grade("t::late", 99, sys.argv[2])], Path(sys.argv[1]))
"""


@pytest.mark.e2e
def test_a_writer_waiting_while_the_history_is_replaced_appends_to_the_new_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "GRADES.jsonl"
    path.write_bytes(line("t::a", 1, "run-1") + line("t::a", 2, "run-2"))
    rewritten = line("t::a", 2, "run-2")
    with locked_history(path, timeout=DEADLINE):
        appender = subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(path), "run-3"],
            cwd=Path(__file__).parents[2],
        )
        wait_until_open(appender.pid, path)  # it has the old file, and waits for its lock
        partial = tmp_path / "new.partial"
        partial.write_bytes(rewritten)
        os.replace(partial, path)
    assert appender.wait(timeout=DEADLINE) == 0
    assert path.read_bytes() == rewritten + line("t::late", 99, "run-3")


def test_locking_a_missing_history_or_a_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), locked_history(tmp_path / "none.jsonl", timeout=0):
        pass
    store = tmp_path / "audit.db"
    store.write_bytes(b"SQLite format 3\x00" + bytes(100))
    with (
        pytest.raises(HistoryError, match="an SQLite database"),
        locked_history(store, timeout=0),
    ):
        pass
