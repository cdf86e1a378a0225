"""``cleo-grade junit``'s document written one test case at a time, never held whole.

junit-xml builds the whole document (and a DOM of it) in memory: for a history of 200,000
sessions that is gigabytes. Here each case goes through the same junit-xml and minidom calls
on its own (the same text, escaping and indentation as inside the whole document) into a
temporary spool file, counted as it goes; the frame that carries the counts is made the
same way, then written before the spooled cases.
"""

from __future__ import annotations

import codecs
import functools
import io
import re
import tempfile
import xml.dom.minidom
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Final
from xml.etree import ElementTree as ET

from pytest_cleo_grade.core._text import PRINTABLE, PRINTABLE_LINES, printable_ascii

if TYPE_CHECKING:
    from junit_xml import TestCase

__all__ = ["Counts", "document_chunks", "spool_cases", "write_text", "xml_text"]

_CHUNK = 1 << 20


@dataclass
class Counts:
    """What the document held: its test cases and how many of them failed."""

    tests: int = 0
    failures: int = 0


def _clean(text: str) -> str:
    from junit_xml import _clean_illegal_xml_chars  # what to_xml_report_string applies

    cleaned: str = _clean_illegal_xml_chars(text)
    return cleaned


#: Cases cleaned and re-parsed together: junit-xml's cleaning builds its pattern on every call.
_BATCH = 256


def _cases_xml(cases: list[TestCase]) -> str:
    """These ``<testcase>`` elements as the whole pretty-printed document has them (two tabs
    in): the cleaning is per character and each case a sibling, so a batch of them is the
    text they have among all the others."""
    from junit_xml import TestSuite

    element = TestSuite("", cases).build_xml_doc()
    text = _clean(ET.tostring(element).decode("utf-8"))
    out = io.StringIO()
    root = xml.dom.minidom.parseString(text.encode("utf-8")).documentElement
    assert root is not None  # one element, as ElementTree wrote it
    for node in root.childNodes:
        node.writexml(out, "\t\t", "\t", "\n")
    return out.getvalue()


def _frame(name: str, counts: Counts) -> tuple[str, str]:
    """(the document up to its cases, the rest), as to_xml_report_string writes them."""
    from junit_xml import TestSuite

    suite = TestSuite(name, []).build_xml_doc()
    suite.set("failures", str(counts.failures))
    suite.set("tests", str(counts.tests))
    root = ET.Element("testsuites")
    for key, value in (
        ("disabled", "0"),
        ("errors", "0"),
        ("failures", str(counts.failures)),
        ("tests", str(counts.tests)),
        ("time", "0.0"),
    ):
        root.set(key, value)
    root.append(suite)
    text = _clean(ET.tostring(root).decode("utf-8"))
    pretty: str = xml.dom.minidom.parseString(text.encode("utf-8")).toprettyxml()
    if not counts.tests:
        return pretty, ""
    declaration, outer, inner, *_rest = pretty.split("\n")
    assert inner.endswith("/>")
    head = f"{declaration}\n{outer}\n{inner[:-2]}>\n"
    return head, "\t</testsuite>\n</testsuites>\n"


#: Characters every step of junit-xml's way (ElementTree's ASCII output with character
#: references, the cleaning, expat, minidom) hands on unchanged: printable ASCII and the
#: Basic Multilingual Plane's characters but C1 controls, surrogates and non-characters.
_PLAIN = "\x20-\x7e\xa0-\ud7ff\ue000-\ufdcf\ufdf0-\ufffd"
_PLAIN_ATTRIBUTE = re.compile(f"[{_PLAIN}]*")
#: In text, line breaks too (a carriage return would become one: expat's end of line).
_PLAIN_TEXT = re.compile(f"[\n{_PLAIN}]*")


def _plain_attribute(text: str) -> bool:
    return printable_ascii(text) or _PLAIN_ATTRIBUTE.fullmatch(text) is not None


def _plain_text(text: str) -> bool:
    return printable_ascii(text, PRINTABLE_LINES) or _PLAIN_TEXT.fullmatch(text) is not None


#: The fields of a case this writer spells; a case with any other set takes junit-xml's way.
_OTHER_FIELDS = (
    *("assertions", "elapsed_sec", "status", "category", "file", "line", "log", "url"),
    *("stderr", "errors", "skipped"),
)


@functools.cache
def _quotes_in_text() -> bool:
    """Whether this Python's minidom writes ``"`` in text as ``&quot;`` (before 3.13 it
    does; from 3.13 only attributes): asked of minidom itself, as the document is its."""
    root = xml.dom.minidom.parseString(b'<a>"</a>').documentElement
    assert root is not None
    return "&quot;" in root.toxml()


def _escaped(text: str, *, quotes: bool) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if quotes else text


def _attributes(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f' {name}="{_escaped(value, quotes=True)}"' for name, value in pairs)


def _plain_case_xml(case: TestCase) -> str | None:
    """The case's ``<testcase>`` exactly as :func:`_cases_xml` writes it, without building
    and re-parsing a document, when all its text is plain (see ``_PLAIN``); else None."""
    if any(getattr(case, field) for field in _OTHER_FIELDS):
        return None
    attributes = [("name", case.name)]
    if case.timestamp:
        attributes.append(("timestamp", case.timestamp))
    if case.classname:
        attributes.append(("classname", case.classname))
    failures = [f for f in case.failures if f["output"] or f["message"]]
    texts = [f["output"] or "" for f in failures]
    if case.stdout:
        texts.append(case.stdout)
    named = [v for _, v in attributes]
    named += [str(f[k]) for f in failures for k in ("message", "type") if f[k]]
    if not all(isinstance(v, str) and _plain_attribute(v) for v in named):
        return None
    if not all(isinstance(t, str) and _plain_text(t) for t in texts):
        return None
    quotes = _quotes_in_text()
    children = []
    for failure in failures:
        pairs = [("type", str(failure["type"] or "failure"))]
        if failure["message"]:
            pairs.insert(1, ("message", str(failure["message"])))
        head = f"\t\t\t<failure{_attributes(pairs)}"
        output = failure["output"]
        children.append(
            f"{head}>{_escaped(output, quotes=quotes)}</failure>\n" if output else f"{head}/>\n"
        )
    if case.stdout:
        children.append(f"\t\t\t<system-out>{_escaped(case.stdout, quotes=quotes)}</system-out>\n")
    head = f"\t\t<testcase{_attributes(attributes)}"
    if not children:
        return f"{head}/>\n"
    return f"{head}>\n{''.join(children)}\t\t</testcase>\n"


def spool_cases(cases: Iterable[TestCase]) -> tuple[IO[bytes], Counts]:
    """Each ``<testcase>`` into a temporary file, counted. Plain cases are spelled here; the
    others take junit-xml's way in batches (in order)."""
    counts = Counts()
    spool = tempfile.TemporaryFile()  # noqa: SIM115 (handed to document_chunks, which closes it)
    try:
        batch: list[TestCase] = []
        for case in cases:
            counts.tests += 1
            counts.failures += bool(case.is_failure())
            plain = _plain_case_xml(case)
            if plain is None:
                batch.append(case)
                if len(batch) < _BATCH:
                    continue
            if batch:
                spool.write(_cases_xml(batch).encode("utf-8"))
                batch = []
            if plain is not None:
                spool.write(plain.encode("utf-8"))
        if batch:
            spool.write(_cases_xml(batch).encode("utf-8"))
    except BaseException:
        spool.close()
        raise
    return spool, counts


def document_chunks(name: str, spool: IO[bytes], counts: Counts) -> Iterator[bytes]:
    """The JUnit document of the spooled cases as UTF-8 chunks (the spool closed after)."""
    with spool:
        head, tail = _frame(name, counts)
        yield head.encode("utf-8")
        spool.seek(0)
        while chunk := spool.read(_CHUNK):
            yield chunk
        yield tail.encode("utf-8")


def write_text(write: Callable[[str], object], chunks: Iterable[bytes]) -> None:
    """Write UTF-8 chunks to a text stream (a character split between chunks kept whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for chunk in chunks:
        write(decoder.decode(chunk))
    write(decoder.decode(b"", final=True))


#: What XML 1.0 cannot hold at all, even as a character reference (junit-xml drops C0
#: controls itself, but re-parses its output, so these would crash it).
_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


#: Printable ASCII and the three controls XML holds: ASCII text of these alone is kept.
_XML_PLAIN: Final = PRINTABLE + b"\t\n\r"


def xml_text(text: str) -> str:
    """Agent text (a task id in a flag, a session id) as XML can hold it: what it cannot is
    spelled as its escape (``\\ufffe``)."""
    if printable_ascii(text, _XML_PLAIN):
        return text  # nothing XML cannot hold (a report is mostly such text)
    return _NOT_XML.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
