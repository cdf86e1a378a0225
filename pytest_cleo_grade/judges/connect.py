"""The default connector: judges over HTTP and their replies cached in the audit store."""

from __future__ import annotations

from pathlib import Path

from pytest_cleo_grade.core.settings import JudgeCacheMode
from pytest_cleo_grade.judges._cache import JudgeCache
from pytest_cleo_grade.judges.http import build_judge
from pytest_cleo_grade.judges.protocol import Judge, JudgeSettings, ReplyCache

__all__ = ["DefaultConnector"]


class DefaultConnector:
    """The OpenAI-compatible HTTP judge and the SQLite reply cache (a JudgeConnector)."""

    def judge(self, settings: JudgeSettings) -> Judge:
        return build_judge(settings)

    def cache(self, path: Path, mode: JudgeCacheMode) -> ReplyCache:
        return JudgeCache(path, mode)
