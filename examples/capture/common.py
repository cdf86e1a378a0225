"""What the capture examples share: a graded session in a temporary directory, and its report."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_cleo_grade.grading.session import GradeSession, SessionSettings


@contextmanager
def graded_session() -> Iterator[GradeSession]:
    """What the graded_session fixture gives a test, outside pytest."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        GradeSession(SessionSettings(db_path=Path(tmp) / "audit.db")) as session,
    ):
        yield session


def report(session: GradeSession) -> None:
    """Print each entry the session captured and its grade."""
    for e in session.entries:
        print(
            f"  {e.domain}.{e.operation:<6} gateway={e.metadata.gateway} "
            f"success={e.result.success} exit={e.result.exit_code}"
        )
    result = session.grade()
    error_protocol = result.dimensions["errorProtocol"]
    print(f"{result.total_score}/100 {result.letter}, errorProtocol {error_protocol.score}/20")
    for text in [*error_protocol.evidence, *result.flags]:
        print(f"  - {text}")
