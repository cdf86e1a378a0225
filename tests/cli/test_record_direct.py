"""``cleo-grade record``'s direct path: the full path's rows and errors, without pydantic."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import random
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.cli import common, main, record
from pytest_cleo_grade.cli.main import build_parser
from pytest_cleo_grade.core.errors import StoreError
from pytest_cleo_grade.store import AUDIT_COLUMNS, AuditStore, _migrations, _schema, _sqlite
from pytest_cleo_grade.store._row import NotPlainJSON, plain_json

SESSION = "session-7-é"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An existing, current store, and grade mode for SESSION recording into it."""
    path = tmp_path / "a.db"
    with AuditStore(path):
        pass
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", SESSION)
    monkeypatch.setenv("CLEO_AUDIT_DB", str(path))
    return path


def parsed(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    args = build_parser().parse_args(["record", *argv])
    return args, record._params(args.params)


def stored(db: Path) -> list[dict[str, tuple[object, str]]]:
    """Each row's every column as (value, SQLite type), in insertion order."""
    columns = ", ".join(f"{c}, typeof({c})" for c in AUDIT_COLUMNS)
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(f"SELECT {columns} FROM audit_log ORDER BY rowid").fetchall()
    finally:
        conn.close()
    return [{c: (row[2 * i], row[2 * i + 1]) for i, c in enumerate(AUDIT_COLUMNS)} for row in rows]


def assert_same_rows(direct: dict[str, Any], full: dict[str, Any]) -> None:
    # The id and the time are each call's own; everything else is the call.
    for column in AUDIT_COLUMNS:
        if column not in {"id", "timestamp"}:
            assert direct[column] == full[column], column
    for row in (direct, full):
        assert re.fullmatch(r"[0-9a-f]{32}", str(row["id"][0]))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(row["timestamp"][0]))
    assert direct["timestamp"][0] <= full["timestamp"][0]  # recorded first


NESTED = '{"a": ' * 40 + "[1]" + "}" * 40

CALLS = [
    pytest.param(["tasks", "find"], id="bare"),
    pytest.param(["tasks", "show", "--params", '{"taskId": "T4"}'], id="params"),
    pytest.param(["session", "end", "--params", "null"], id="params-null"),
    pytest.param(["session", "end", "--params", "{}"], id="params-empty"),
    pytest.param(
        ["tasks", "add", "--params", '{"title": "t", "n": 3, "ok": true, "x": null, '
         '"tags": ["a", {"b": [1, 2]}], "neg": -7, "big": 9223372036854775807}'],
        id="params-mixed",
    ),
    pytest.param(
        ["tasks", "add", "--params", '{"f": 2.5, "g": 0.0001, "h": -0.0, "i": 123456789.125, '
         '"j": 1.0, "k": 1e15}'],
        id="params-floats",
    ),
    pytest.param(
        ["tâches", "ajouter", "--params", '{"titre": "é\\u00e9 \u2013 ✓ 😀 中文", '
         '"q": "a \\"b\\" \\\\c", "ctl": "\\u0001\\t\\n\\u001f\\u007f\\u2028\\u2029", '
         '"é": "key"}'],
        id="params-unicode",
    ),
    pytest.param(["tasks", "find", "--params", NESTED], id="params-nested"),
    pytest.param(["tasks", "find", "--exit-code", "1", "--error", "boom"], id="failed"),
    pytest.param(["tasks", "show", "--exit-code", "4", "--error", "not found"], id="not-found"),
    pytest.param(["tasks", "show", "--exit-code", "-1"], id="negative-exit"),
    pytest.param(["a", "b", "--exit-code", str(2**63 - 1)], id="exit-max"),
    pytest.param(["a", "b", "--exit-code", str(-(2**63))], id="exit-min"),
    pytest.param(["a", "b", "--error", ""], id="empty-error"),
    pytest.param(["a", "b", "--error", "échec ✗\nsecond line"], id="unicode-error"),
    pytest.param(["session", "list", "--gateway", "cleo_query"], id="cleo_query"),
    pytest.param(["session", "list", "--gateway", "query"], id="query"),
    pytest.param(["tasks", "add", "--gateway", "cleo_mutate"], id="cleo_mutate"),
    pytest.param(["tasks", "add", "--gateway", "mutate"], id="mutate"),
    pytest.param(["tasks", "show", "--task-id", "T001"], id="task"),
    pytest.param(["tasks", "show", "--task-id", "system"], id="task-placeholder"),
    pytest.param(["tasks", "show", "--task-id", "unknown"], id="task-unknown"),
    pytest.param(["tasks", "show", "--task-id", ""], id="task-empty"),
    pytest.param(["tasks", "show", "--task-id", "tâche-✓"], id="task-unicode"),
    pytest.param(["a", "b", "--duration", "0"], id="duration-zero"),
    pytest.param(["a", "b", "--duration", "2.5"], id="duration-fraction"),
    pytest.param(["a", "b", "--duration", "1234567"], id="duration-whole"),
    pytest.param(["a", "b", "--duration", "1e-7"], id="duration-tiny"),
    pytest.param(["a", "b", "--source", "mcp"], id="source"),
    pytest.param(["a", "b", "--source", ""], id="source-empty"),
    pytest.param(["skill", "show.all", "--source", "shell ✓"], id="dotted-unicode"),
    pytest.param(
        ["tasks", "update", "--params", '{"taskId": "T9", "done": false}', "--exit-code", "2",
         "--gateway", "cleo_mutate", "--error", "E_CONFLICT", "--duration", "12.75",
         "--task-id", "T9", "--source", "rpc"],
        id="everything",
    ),
]  # fmt: skip


@pytest.mark.parametrize("argv", CALLS)
def test_the_direct_path_stores_the_row_the_full_path_stores(db: Path, argv: list[str]) -> None:
    args, params = parsed(argv)
    assert record._recorded_directly(args, params, SESSION, db) is True
    record._record_entry(args, params, SESSION, db)
    direct, full = stored(db)
    assert_same_rows(direct, full)
    with AuditStore(db, read_only=True) as store:  # and the store reads both back alike
        first, second = store.session_entries(SESSION)
    assert first.model_copy(update={"timestamp": second.timestamp}) == second


DECLINED = [
    pytest.param(["a", "b", "--params", '{"x": 1e-7}'], id="float-exponent-small"),
    pytest.param(["a", "b", "--params", '{"x": [1e16]}'], id="float-exponent-large"),
    pytest.param(["a", "b", "--params", '{"x": 18446744073709551616}'], id="int-beyond-64-bits"),
]


@pytest.mark.parametrize("argv", DECLINED)
def test_values_pydantic_core_may_write_otherwise_go_the_full_way(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    args, params = parsed(argv)
    assert record._recorded_directly(args, params, SESSION, db) is False
    assert stored(db) == []
    assert main(["record", *argv]) == 0
    record._record_entry(args, params, SESSION, db)
    through_main, full = stored(db)
    assert_same_rows(through_main, full)
    assert capsys.readouterr() == ("", "")


def test_a_call_recorded_through_main_is_stored_once_by_either_path(
    db: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Into the existing store (the direct path) and into a new one (the full path, creating
    # it): one row each, the same call.
    argv = ["tasks", "add", "--params", '{"title": "t"}', "--gateway", "cleo_mutate"]
    assert main(["record", *argv]) == 0
    fresh = tmp_path / "new" / "b.db"
    monkeypatch.setenv("CLEO_AUDIT_DB", str(fresh))
    assert main(["record", *argv]) == 0
    assert capsys.readouterr() == ("", "")
    ((direct,), (full,)) = stored(db), stored(fresh)
    assert_same_rows(direct, full)


#: Each refused, and noted for the graded session (argparse's own errors come before any).
BAD = [
    pytest.param(["", "b"], id="empty-domain"),
    pytest.param(["a", ""], id="empty-operation"),
    pytest.param(["", ""], id="both-empty"),
    pytest.param(["a", "b", "--exit-code", str(2**63)], id="exit-too-big"),
    pytest.param(["a", "b", "--exit-code", str(-(2**63) - 1)], id="exit-too-small"),
    pytest.param(["a", "b", "--gateway", "cleo-query"], id="gateway"),
    pytest.param(["a", "b", "--params", "{"], id="params-json"),
    pytest.param(["a", "b", "--params", "[]"], id="params-list"),
    pytest.param(["a", "b", "--params", '{"x": NaN}'], id="params-nan"),
    pytest.param(["a", "b", "--params", '{"x": 1e999}'], id="params-overflow"),
    pytest.param(["a", "b", "--params", '{"a": ' * 101 + "1" + "}" * 101], id="params-deep"),
    pytest.param(["a", "b", "--params", '{"x": "\\ud800"}'], id="params-surrogate"),
    pytest.param(["a", "b", "--duration", "-1"], id="duration-negative"),
    pytest.param(["a", "b", "--duration", "nan"], id="duration-nan"),
    pytest.param(["a", "b", "--source", "cli\udcff"], id="source-not-utf8"),
    pytest.param(["a", "b\udcff"], id="operation-not-utf8"),
]


def outcome(
    capsys: pytest.CaptureFixture[str], db: Path, argv: list[str]
) -> tuple[int, str, str, list[str]]:
    status = main(["record", *argv])
    out, err = capsys.readouterr()
    refused = db.with_name(db.name + ".refused")
    reasons = refused.read_text().splitlines() if refused.exists() else []
    return status, out, err, reasons


@pytest.mark.parametrize("argv", BAD)
def test_a_bad_argument_is_said_alike_with_or_without_a_store_to_write_directly(
    db: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
) -> None:
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    existing = outcome(capsys, db, argv)
    missing = tmp_path / "missing" / "b.db"
    missing.parent.mkdir()
    monkeypatch.setenv("CLEO_AUDIT_DB", str(missing))
    assert outcome(capsys, missing, argv) == existing
    status, out, err, reasons = existing
    assert (status, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("cleo-grade") and "Traceback" not in err
    assert len(reasons) == 1 and "(cleo-grade record): " in reasons[0]
    assert stored(db) == [] and hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not missing.exists()


def test_an_argument_argparse_refuses_is_said_before_any_store_is_looked_at(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err, reasons = outcome(capsys, db, ["a", "b", "--exit-code", "x"])
    assert (status, out, reasons) == (2, "", [])
    assert err == "cleo-grade record: argument --exit-code: invalid int value: 'x'\n"


@pytest.mark.parametrize(
    "change",
    ["missing", "empty", "rollback-journal", "newer-schema", "link", "older-schema"],
)
def test_the_direct_path_leaves_any_other_store_to_the_full_path(
    db: Path, tmp_path: Path, change: str
) -> None:
    target = db
    if change == "missing":
        db.unlink()
    elif change == "empty":
        db.write_bytes(b"")
    elif change == "rollback-journal":
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
    elif change == "newer-schema":
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                "VALUES ('pytest_cleo_grade', '9999_from_the_future', 'now')"
            )
        conn.close()
    elif change == "older-schema":
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM _sqlite_migrations")
        conn.close()
    else:
        target = tmp_path / "link.db"
        target.symlink_to(db)
    before = db.read_bytes() if db.exists() else None
    args, params = parsed(["tasks", "find"])
    assert record._recorded_directly(args, params, SESSION, target) is False
    assert (db.read_bytes() if db.exists() else None) == before


def test_the_direct_path_leaves_a_store_an_import_holds_exclusively_to_the_full_path(
    db: Path,
) -> None:
    # A failed import that created the store takes its flock exclusively to check that it may
    # remove the file: a writer must wait for it (AuditStore does), not write into it.
    fd = os.open(db, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        args, params = parsed(["tasks", "find"])
        assert record._recorded_directly(args, params, SESSION, db) is False
    finally:
        os.close(fd)
    assert stored(db) == []


def test_a_store_that_refuses_the_insert_is_the_stores_error(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trigger stands in for what only the insert finds (a full disk, a corrupt page).
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON audit_log "
            "BEGIN SELECT RAISE(ABORT, 'disk is full'); END"
        )
    conn.close()
    status, out, err, reasons = outcome(capsys, db, ["tasks", "find"])
    assert (status, out) == (2, "")
    assert err == f"cleo-grade: error: {db}: cannot write: disk full (disk is full)\n"
    assert reasons and "tasks.find (cleo-grade record): " in reasons[0]
    args, params = parsed(["tasks", "find"])
    with pytest.raises(StoreError, match="cannot write: disk full") as full:
        record._record_entry(args, params, SESSION, db)
    assert f"cleo-grade: error: {full.value}\n" == err


def test_the_environment_names_the_session_as_the_capture_layer_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = str(tmp_path / "a.db")
    settings = [
        {},
        {"CLEO_AUDIT_DB": db},
        {"CLEO_AUDIT_DB": "", "CLEO_SESSION_ID": "s"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_ID": "s"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_ID": "s", "CLEO_SESSION_GRADE": "true"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_GRADE": "TRUE", "CLEO_SESSION_GRADE_ID": "g"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_GRADE": "yes", "CLEO_SESSION_GRADE_ID": "g"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_GRADE": "true", "CLEO_SESSION_GRADE_ID": "",
         "CLEO_SESSION_ID": "s"},
        {"CLEO_AUDIT_DB": db, "CLEO_SESSION_GRADE": "true", "CLEO_SESSION_GRADE_ID": "g",
         "CLEO_SESSION_ID": "s"},
        {"CLEO_AUDIT_DB": "rel/a.db", "CLEO_SESSION_ID": "s"},
    ]  # fmt: skip
    seen = set()
    for env in settings:
        for name in (common.ENV_AUDIT_DB, common.ENV_GRADE, common.ENV_GRADE_ID):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(common.ENV_SESSION_ID, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        expected = audit.active_session()
        assert record._environment_session(dict(os.environ)) == expected, env
        seen.add(expected)
    assert len(seen) >= 5  # the settings tell sessions apart


def test_what_record_repeats_of_the_capture_layer_and_the_schema_is_theirs() -> None:
    assert (common.ENV_AUDIT_DB, common.ENV_GRADE, common.ENV_GRADE_ID, common.ENV_SESSION_ID) == (
        audit.ENV_AUDIT_DB,
        audit.ENV_GRADE,
        audit.ENV_GRADE_ID,
        audit.ENV_SESSION_ID,
    )
    assert (record._GATEWAYS, record._MUTATE_GATEWAYS) == (audit.GATEWAYS, audit.MUTATE_GATEWAYS)
    assert _sqlite.CURRENT_MIGRATIONS == _migrations.KNOWN_MIGRATIONS
    migrations = (Migrations.migrations_table, _migrations.MIGRATIONS.name)
    assert migrations == (_sqlite.MIGRATIONS_TABLE, _sqlite.MIGRATION_SET)


def _values(seed: int) -> list[object]:
    rng = random.Random(seed)
    floats = [rng.choice((1, -1)) * 10 ** rng.uniform(-8, 20) for _ in range(3000)]
    floats += [round(f, rng.randint(0, 8)) for f in floats[:1000]]
    floats += [0.0, -0.0, 1e-4, 9.999e-5, 1e15, 1e16, 9999999999999998.0, 2.0**53]
    texts = ["".join(map(chr, range(start, start + 64))) for start in range(0, 0x3000, 64)]
    texts += ["😀🎉", "\U0010ffff", "\ufeff\u2028\u2029", '"\\/', ""]
    ints = [0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 10**30]
    nested: list[object] = [{"a": [1, {"b": None, "c": [True, False]}], "é": {"ü": []}}]
    return [*floats, *texts, *ints, *nested, None, True, False, [], {}]


def test_plain_json_writes_what_pydantic_core_writes_or_declines() -> None:
    written = declined = 0
    for value in _values(7):
        try:
            text = plain_json({"v": value})
        except NotPlainJSON:
            declined += 1
            continue
        written += 1
        assert text == _schema._to_json({"v": value}), value
    assert written > 3000 and declined > 100  # both sides of the line are exercised
    for unsure in (1e-7, 1e16, float("nan"), math.inf, 2**63, "\ud800", (1, 2), {1: 2}):
        with pytest.raises(NotPlainJSON):
            plain_json({"v": unsure})


PROBE = textwrap.dedent(
    """
    import json, sys
    from pytest_cleo_grade.cli import main
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
    print(json.dumps([status, sorted(sys.modules)]))
    """
)


def fresh_interpreter(argv: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    status, modules = json.loads(done.stdout.splitlines()[-1])
    return status, set(modules)


HEAVY = {"pydantic", "pydantic_core", "sqlite_utils", "pytest", "_pytest"}


@pytest.mark.e2e
def test_recording_into_an_existing_store_loads_neither_pydantic_nor_sqlite_utils(
    db: Path,
) -> None:
    env = {"CLEO_SESSION_GRADE": "true", "CLEO_SESSION_GRADE_ID": SESSION, "CLEO_AUDIT_DB": str(db)}
    argv = ["record", "tasks", "show", "--params", '{"taskId": "T1"}', "--exit-code", "4"]
    status, modules = fresh_interpreter(argv, env)
    assert status == 0
    assert not modules & HEAVY
    commands = {m for m in modules if m.startswith("pytest_cleo_grade.cli.")}
    assert commands == {"pytest_cleo_grade.cli.main", "pytest_cleo_grade.cli.common",
                        "pytest_cleo_grade.cli.record"}  # fmt: skip
    (row,) = stored(db)
    assert (row["operation"], row["exit_code"], row["details_json"]) == (
        ("show", "text"),
        (4, "integer"),
        ('{"taskId":"T1"}', "text"),
    )
    # Into a store not there yet, the full path creates it, as before.
    db.unlink()
    status, modules = fresh_interpreter(argv, env)
    assert status == 0 and "pydantic" in modules
    assert len(stored(db)) == 1
