"""Run the demo agent suite graded end to end (what ``make demo`` does).

Runs pytest on ``examples/`` with the plugin, JUnit XML and history under ``.cleo/`` of the
repository, then says where they are. Exits with pytest's status (0 when the demo works).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CLEO = ROOT / ".cleo"
JUNIT = CLEO / "demo-junit.xml"
HISTORY = CLEO / "metrics" / "GRADES.jsonl"
DB = CLEO / "audit.db"


def main() -> int:
    before = _lines(HISTORY)
    env = dict(os.environ)
    # The demo must show the same output wherever it runs.
    env.pop("PYTEST_ADDOPTS", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        f"--junitxml={JUNIT}",
        f"--cleo-grade-db={DB}",
        f"--cleo-grade-history={HISTORY}",
        *sys.argv[1:],
    ]
    status = subprocess.run(command, cwd=EXAMPLES, env=env, check=False).returncode
    added = _lines(HISTORY) - before
    print()
    print(f"JUnit XML:     {JUNIT.relative_to(ROOT)}")
    print(f"Grade history: {HISTORY.relative_to(ROOT)} ({added} grades added by this run)")
    print(f"Audit store:   {DB.relative_to(ROOT)}")
    return status


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
