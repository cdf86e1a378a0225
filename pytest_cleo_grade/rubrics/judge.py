"""Compatibility: the judge protocol's earlier home; import from ``judges.protocol``
(judges without I/O) or ``judges.http`` (the OpenAI-compatible HTTP judge)."""

from __future__ import annotations

from pytest_cleo_grade.judges.http import OpenAICompatibleJudge, build_judge
from pytest_cleo_grade.judges.protocol import (
    CallableJudge,
    Judge,
    JudgeReply,
    JudgeReplyError,
    JudgeSettings,
    TokenUsage,
)

__all__ = [
    "CallableJudge",
    "Judge",
    "JudgeReply",
    "JudgeReplyError",
    "JudgeSettings",
    "OpenAICompatibleJudge",
    "TokenUsage",
    "build_judge",
]
