"""``cleo-grade import``: put an entries file, a trace or a CLEO database into the store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_cleo_grade.cli.common import CommandError, add_db_option, db_path, session_id_arg
from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.models import AuditEntry, format_timestamp
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store._imports import import_cleo_rows, stream_entries_file
from pytest_cleo_grade.store.sources import (
    ENTRY_FILE_FORMATS,
    IMPORT_FORMATS,
    find_cleo_db,
    is_sqlite_file,
    read_cleo_db,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    importer = subparsers.add_parser(
        "import",
        help="import audit entries into the store",
        description=(
            "Import a JSON/JSONL file of audit entries, or the audit_log of a CLEO database "
            "(a .cleo/cleo.db or .cleo/tasks.db file, or a project directory holding one), "
            "into the audit store. All or nothing: a bad entry aborts with its line number "
            "and nothing is imported. A CLEO database is opened read-only."
        ),
    )
    importer.add_argument(
        "source",
        nargs="?",
        metavar="FILE",
        help="entries file, CLEO database or project (not with --from langfuse)",
    )
    importer.add_argument(
        "--from",
        dest="origin",
        choices=("langfuse",),
        help=(
            "langfuse: fetch the session --session-id names through Langfuse's public API "
            "(keys and host from LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY and LANGFUSE_HOST): "
            "its tool observations as calls, its generations as the conversation"
        ),
    )
    importer.add_argument(
        "--format",
        dest="format",
        choices=IMPORT_FORMATS,
        default="auto",
        help=(
            "auto (default): JSON/JSONL audit entries or a CLEO database, told apart by "
            "content; json or jsonl: an audit entries file (a JSON array or JSON lines, "
            "either name reads both); cleo-db: a CLEO database or a project directory "
            "holding one; otlp: OTLP JSON "
            "traces (a Collector's file exporter), one session per gen_ai.conversation.id or "
            "trace id unless --session-id names one; claude-code: a Claude Code session "
            "transcript (~/.claude/projects/*/SESSION.jsonl), its tool calls under its "
            "sessionId unless --session-id names one"
        ),
    )
    importer.add_argument(
        "--session-id",
        dest="session_id",
        type=session_id_arg,
        metavar="ID",
        help="import only this session (exact id); entries without a sessionId join it",
    )
    add_db_option(importer)
    importer.set_defaults(handler=run_import)


def run_import(args: argparse.Namespace) -> int:
    if args.origin == "langfuse":
        return _import_langfuse(args)
    if args.source is None:
        raise CommandError("cleo-grade import: name the FILE to import (or --from langfuse)")
    source = Path(args.source)
    if not source.exists():
        raise CommandError(f"cleo-grade import: {source}: no such file")
    target = db_path(args)
    if args.format == "otlp":
        return _import_otlp(source, target, args.session_id)
    if args.format == "claude-code":
        from pytest_cleo_grade.capture.claude_code import (
            load_transcript,
            load_transcript_conversation,
        )

        entries = load_transcript(source, session_id=args.session_id)
        return _import_loaded(entries, target, load_transcript_conversation(source))
    if args.format in ENTRY_FILE_FORMATS:
        cleo = False
        if source.is_dir() or is_sqlite_file(source):
            raise CommandError(
                f"cleo-grade import: {source}: --format {args.format} reads an audit entries "
                "file, and this is a CLEO database or a directory (use --format cleo-db)"
            )
    elif args.format == "cleo-db":
        cleo = True
    else:
        cleo = source.is_dir() or is_sqlite_file(source)
    if cleo:
        cleo_db = find_cleo_db(source)
        if cleo_db.resolve() == target.resolve():
            raise CommandError(f"cleo-grade import: {cleo_db} is the store itself")
    if cleo:
        # Read (and validate) every row before touching the store: a bad row creates nothing.
        items = read_cleo_db(cleo_db, session_id=args.session_id)
        with AuditStore(target) as store:
            read, added = len(items), import_cleo_rows(store, items)
        skipped = f" ({read - added} already there)" if read != added else ""
        print(terminal_text(f"Imported {added} entries from {cleo_db} into {target}{skipped}"))
        return 0
    _warn_if_imported_before(source, target, args.session_id)
    # Streamed in one transaction: memory holds a batch, a bad line changes nothing.
    summary = stream_entries_file(target, source, session_id=args.session_id)
    shown = ", ".join(summary.sessions) + (", ..." if summary.more_sessions else "")
    print(terminal_text(f"Imported {summary.count} entries into {target} (sessions: {shown})"))
    return 0


def _warn_if_imported_before(source: Path, target: Path, session_id: str | None) -> None:
    """An entries file's entries carry no ids, so a second import stores every call again and
    the session's grade counts each twice: say so when the file's first entry is in the store
    already (the import still runs: the store may rightly hold a call that looks the same)."""
    import sys

    from pytest_cleo_grade.core.errors import CleoGradeError
    from pytest_cleo_grade.store.sources import iter_entry_batches

    if not target.is_file():
        return
    try:
        first = next(iter(next(iter_entry_batches(source), [])), None)
        if first is None:
            return
        session = session_id or first.session_id
        if session is None:
            return
        with AuditStore(target, read_only=True) as store:
            stored = store.session_entries(session)
    except (CleoGradeError, OSError):
        return  # the import itself reports a bad file or store
    key = (first.timestamp, first.domain, first.operation, first.params)
    if any((e.timestamp, e.domain, e.operation, e.params) == key for e in stored):
        print(
            terminal_text(
                f"cleo-grade import: warning: {source}: its first entry ({first.domain}."
                f"{first.operation} at {format_timestamp(first.timestamp)}) is in session "
                f"{session} of {target} already: importing an entries file again stores its "
                "calls again, and the session's grade counts them twice (grade the file with "
                "cleo-grade grade --entries FILE, or import into another --db)"
            ),
            file=sys.stderr,
        )


def _import_langfuse(args: argparse.Namespace) -> int:
    """A Langfuse session, fetched whole before the store is touched."""
    import os

    from pytest_cleo_grade.capture.langfuse import fetch_session
    from pytest_cleo_grade.reports.langfuse import keys_from

    if args.source is not None:
        raise CommandError(
            f"cleo-grade import: --from langfuse takes no FILE (got {args.source!r})"
        )
    if not args.session_id:
        raise CommandError("cleo-grade import: --from langfuse needs --session-id ID")
    keys = keys_from(os.environ)
    if keys is None:
        raise CommandError(
            "cleo-grade import: --from langfuse needs LANGFUSE_PUBLIC_KEY and "
            "LANGFUSE_SECRET_KEY (and LANGFUSE_HOST for a server other than Langfuse Cloud)"
        )
    public, secret, base = keys
    try:
        fetched = fetch_session(
            args.session_id, public_key=public, secret_key=secret, base_url=base
        )
    except CleoGradeError as exc:
        raise CommandError(f"cleo-grade import: {exc}") from None
    if not fetched.traces:
        raise CommandError(
            f"cleo-grade import: langfuse has no trace in session {args.session_id!r}"
        )
    return _import_loaded(fetched.entries, db_path(args), fetched.conversation, fetched.session_id)


def _import_otlp(source: Path, target: Path, session_id: str | None) -> int:
    # only this format needs it
    from pytest_cleo_grade.capture.otlp import load_otlp_conversation, load_otlp_file

    entries = load_otlp_file(source, session_id=session_id)
    return _import_loaded(entries, target, load_otlp_conversation(source))


def _import_loaded(
    entries: list[AuditEntry],
    target: Path,
    conversation: Conversation | None = None,
    session: str | None = None,
) -> int:
    """Store entries read (and checked) whole first: a bad line changes nothing. A call the
    file names (a transcript's tool use id, a span's trace and span ids) is stored once per
    session, however often the file (a transcript that grows, say) is imported.

    The file's conversation goes with the calls when they are one session's, once: a
    session that has a stored conversation already keeps it."""
    from pytest_cleo_grade.store._schema import entry_row

    rows = [entry_row(entry, _call_id(entry)) for entry in entries]
    sessions = sorted({e.session_id or "(no session)" for e in entries}) or (
        [session] if session else []
    )
    talk = ""
    with AuditStore(target) as store:
        added = store.append_rows(rows)
        if conversation is not None and not conversation.empty and len(sessions) == 1:
            only = session or entries[0].session_id or ""
            if store.session_conversation(only).empty:
                store.append_conversation(only, conversation)
                talk = f", {len(conversation.messages)} messages"
    shown = ", ".join(sessions[:5]) + (", ..." if len(sessions) > 5 else "")
    skipped = f"; {len(entries) - added} already there" if added != len(entries) else ""
    print(
        terminal_text(f"Imported {added} entries{talk} into {target} (sessions: {shown}{skipped})")
    )
    return 0


def _call_id(entry: AuditEntry) -> str | None:
    """The row id of a call its file names, else None (a new id)."""
    extra = entry.metadata.model_extra or {}
    session = entry.session_id or ""
    tool_use, trace, span = extra.get("toolUseId"), extra.get("traceId"), extra.get("spanId")
    if isinstance(tool_use, str) and tool_use:
        return f"{entry.metadata.source}:{session}:{tool_use}"
    if isinstance(trace, str) and trace and isinstance(span, str) and span:
        return f"{entry.metadata.source}:{session}:{trace}:{span}"
    return None
